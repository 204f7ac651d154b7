"""Talking to Phorge: its OAuth server (the authorization code flow) and Conduit's user.whoami.

Phorge's address comes from GORGE_PHORGE_OAUTH_URL, else Phorge's `phabricator.base-uri` as this service's
variable or Phorge's local file says it, never from Phorge's database (a row there would otherwise send the
client secret wherever it points), and it is https unless it is a loopback address or the operator says
GORGE_PHORGE_ALLOW_HTTP. Every answer is bounded in total time and size (outbound.py) and read by the one
JSON reader: a trickling or endless Phorge costs a web worker at most TIMEOUT_SEC.

Nothing here logs or raises a message that holds a token, a code or the client secret: Phorge's own error
descriptions can quote the authorization code ("Authorization code ... not found."), so only Phorge's error
*code* (`invalid_grant`, `ERR-INVALID-AUTH`, ...) ever leaves this module, as answers.py lets it through.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from dataclasses import dataclass
from urllib.parse import urlencode

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from .. import answers, jsonread, outbound
from .config import PhorgeOAuthConfig, address_problem

TIMEOUT_SEC = 10
ANSWER_BYTES = 256 * 1024  # a token answer or a user.whoami is a few hundred bytes
ADMIN_ROLE = "admin"
DISABLED_ROLE = "disabled"


class PhorgeUnknown(Exception):
    """Phorge's address is not known, or not one to send the client secret to; str() says which, safely."""


def config() -> PhorgeOAuthConfig:
    value: PhorgeOAuthConfig = settings.GORGE_PHORGE_OAUTH
    return value


def phorge_url(conf: PhorgeOAuthConfig | None = None) -> str:
    conf = conf or config()
    url = conf.url
    if not url:
        from webhook_delivery.reads.phorge_status import phorge_settings

        try:
            resolved = phorge_settings()
        except Exception:  # noqa: BLE001 - an unreadable Phorge configuration is "not known"
            resolved = None
        if resolved is not None and resolved.base_uri.source in ("variable", "local file"):
            url = resolved.base_uri.value or ""
    if not url:
        raise PhorgeUnknown(
            "Phorge's address is not known: set GORGE_PHORGE_OAUTH_URL, or GORGE_WEBHOOK_PHORGE_BASE_URI, or give "
            "Phorge's local file (GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG); Phorge's database is not trusted for it"
        )
    if (problem := address_problem(url, allow_http=conf.allow_http)) is not None:
        raise PhorgeUnknown(f"Phorge's address is refused: {problem}")
    return url.rstrip("/")


@dataclass(frozen=True)
class Endpoints:
    authorize_url: str
    access_token_url: str
    whoami_url: str


def endpoints(conf: PhorgeOAuthConfig | None = None) -> Endpoints:
    base = phorge_url(conf)
    return Endpoints(f"{base}/oauthserver/auth/", f"{base}/oauthserver/token/", f"{base}/api/user.whoami")


def authorize_redirect(conf: PhorgeOAuthConfig, redirect_uri: str, state: str) -> str:
    """Where the browser goes to ask Phorge for a code (the client's PHID as Phorge names it)."""
    query = urlencode(
        {"response_type": "code", "client_id": conf.client_id, "redirect_uri": redirect_uri, "state": state}
    )
    return f"{endpoints(conf).authorize_url}?{query}"


class TokenRefused(Exception):
    """Phorge's token endpoint refused the code; `code` is its error code, safe to show."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class PhorgeSilent(Exception):
    """No usable answer from Phorge; str() is safe to log."""


def exchange_code(conf: PhorgeOAuthConfig, code: str, redirect_uri: str) -> str:
    """The access token for a code, from Phorge's token endpoint (the secret as a parameter, as Phorge reads
    it). Raises TokenRefused, PhorgeSilent or PhorgeUnknown."""
    url = endpoints(conf).access_token_url
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "client_id": conf.client_id,
        "client_secret": conf.client_secret,
    }
    try:
        answer = outbound.post(url, data=form, timeout=TIMEOUT_SEC, max_bytes=ANSWER_BYTES)
    except outbound.OutboundError as exc:
        raise PhorgeSilent(f"token endpoint: {exc}") from None
    body = None if answer.too_large else jsonread.decode(answer.body)
    if not isinstance(body, dict):
        raise PhorgeSilent("token endpoint: not OAuth JSON" if not answer.too_large else "token endpoint: too large")
    if body.get("error"):
        raise TokenRefused(answers.oauth_code(body["error"], secrets=(code, conf.client_secret)))
    token = body.get("access_token")
    if answer.status != 200 or not isinstance(token, str) or not token:
        raise PhorgeSilent(f"token endpoint: no access token (HTTP {answer.status})")
    return token  # expires_in is not read: Phorge's tokens never expire


class Verdict(enum.Enum):
    ADMIN = "admin"  # a Phorge administrator, not disabled
    REFUSED = "refused"  # not an administrator, disabled, or the token is refused
    UNREACHABLE = "unreachable"  # no usable answer from Phorge


@dataclass(frozen=True)
class WhoAmI:
    verdict: Verdict
    reason: str  # short, safe to log: a role, Phorge's error code, or the kind of failure
    phid: str = ""
    user_name: str = ""
    real_name: str = ""
    email: str = ""


def whoami(token: str, conf: PhorgeOAuthConfig | None = None) -> WhoAmI:
    """Ask Conduit's user.whoami who holds the token. The token goes in the POST body (Conduit reads it only
    as the parameter access_token), never in a URL that a proxy or a debug log could keep."""
    try:
        url = endpoints(conf).whoami_url
    except PhorgeUnknown:
        return WhoAmI(Verdict.UNREACHABLE, "Phorge's address is not known")
    try:
        answer = outbound.post(url, data={"access_token": token}, timeout=TIMEOUT_SEC, max_bytes=ANSWER_BYTES)
    except outbound.OutboundError as exc:
        return WhoAmI(Verdict.UNREACHABLE, f"connection failed ({exc})")
    if answer.status != 200:
        return WhoAmI(Verdict.UNREACHABLE, f"HTTP {answer.status}")
    body = None if answer.too_large else jsonread.decode(answer.body)
    if not isinstance(body, dict):
        return WhoAmI(Verdict.UNREACHABLE, "too large" if answer.too_large else "not a Conduit answer")
    error_code = body.get("error_code")
    if error_code:
        return WhoAmI(Verdict.REFUSED, answers.conduit_code(error_code, secrets=(token,)))
    result = body.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("phid"), str) or not result["phid"]:
        return WhoAmI(Verdict.UNREACHABLE, "not a Conduit answer")
    raw_roles = result.get("roles")
    roles: list[object] = raw_roles if isinstance(raw_roles, list) else []
    info = {
        "phid": result["phid"][:64],
        "user_name": str(result.get("userName") or "")[:255],
        "real_name": str(result.get("realName") or "")[:255],
        "email": str(result.get("primaryEmail") or "")[:254],
    }
    if DISABLED_ROLE in roles:
        return WhoAmI(Verdict.REFUSED, "disabled in Phorge", **info)
    if ADMIN_ROLE not in roles:
        return WhoAmI(Verdict.REFUSED, "not a Phorge administrator", **info)
    return WhoAmI(Verdict.ADMIN, "administrator", **info)


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"gorge-webhook phorge_auth access token\x00" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(token: str) -> str:
    return _fernet().encrypt(token.encode()).decode("ascii")


def unseal(sealed: str) -> str:
    """The stored token, or "" when there is none or it cannot be read (SECRET_KEY changed)."""
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, ValueError):
        return ""
