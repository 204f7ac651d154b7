"""Talking to Phorge: the OAuth client (Authlib's Django client) and Conduit's user.whoami.

Nothing here logs or raises a message that holds a token, a code or the client secret: Phorge's own error
descriptions can quote the authorization code ("Authorization code ... not found."), so only Phorge's error
*code* (`invalid_grant`, `ERR-INVALID-AUTH`, ...) ever leaves this module.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from dataclasses import dataclass
from typing import Any

import requests
from authlib.integrations.django_client import OAuth
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from .config import PhorgeOAuthConfig

TIMEOUT_SEC = 10
ADMIN_ROLE = "admin"
DISABLED_ROLE = "disabled"


class PhorgeUnknown(Exception):
    """Phorge's address is neither configured nor known from Phorge's phabricator.base-uri."""


def config() -> PhorgeOAuthConfig:
    value: PhorgeOAuthConfig = settings.GORGE_PHORGE_OAUTH
    return value


def phorge_url(conf: PhorgeOAuthConfig | None = None) -> str:
    conf = conf or config()
    url = conf.url
    if not url:
        from webhook_delivery.web.phorge_status import phorge_base_uri

        try:
            url = phorge_base_uri() or ""
        except Exception:  # noqa: BLE001 - an unreadable Phorge configuration is "not known"
            url = ""
    if not url:
        raise PhorgeUnknown
    return url.rstrip("/")


def oauth_app(conf: PhorgeOAuthConfig | None = None) -> Any:
    """Authlib's Django OAuth 2 client for Phorge's server: authorization code, the client's secret sent as
    the parameters client_id/client_secret (as Phorge reads them), state kept in the Django session."""
    conf = conf or config()
    base = phorge_url(conf)
    return OAuth().register(
        "phorge",
        client_id=conf.client_id,
        client_secret=conf.client_secret,
        authorize_url=f"{base}/oauthserver/auth/",
        access_token_url=f"{base}/oauthserver/token/",
        client_kwargs={"token_endpoint_auth_method": "client_secret_post"},
    )


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
        base = phorge_url(conf)
    except PhorgeUnknown:
        return WhoAmI(Verdict.UNREACHABLE, "Phorge's address is not known")
    try:
        response = requests.post(
            f"{base}/api/user.whoami", data={"access_token": token}, timeout=TIMEOUT_SEC, allow_redirects=False
        )
    except requests.RequestException as error:
        return WhoAmI(Verdict.UNREACHABLE, f"connection failed ({type(error).__name__})")
    if response.status_code != 200:
        return WhoAmI(Verdict.UNREACHABLE, f"HTTP {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        return WhoAmI(Verdict.UNREACHABLE, "not a Conduit answer")
    if not isinstance(body, dict):
        return WhoAmI(Verdict.UNREACHABLE, "not a Conduit answer")
    error_code = body.get("error_code")
    if error_code:
        return WhoAmI(Verdict.REFUSED, _safe_code(error_code))
    result = body.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("phid"), str) or not result["phid"]:
        return WhoAmI(Verdict.UNREACHABLE, "not a Conduit answer")
    raw_roles = result.get("roles")
    roles: list[object] = raw_roles if isinstance(raw_roles, list) else []
    info = {
        "phid": result["phid"][:64],
        "user_name": str(result.get("userName") or "")[:255],
        "real_name": str(result.get("realName") or ""),
        "email": str(result.get("primaryEmail") or ""),
    }
    if DISABLED_ROLE in roles:
        return WhoAmI(Verdict.REFUSED, "disabled in Phorge", **info)
    if ADMIN_ROLE not in roles:
        return WhoAmI(Verdict.REFUSED, "not a Phorge administrator", **info)
    return WhoAmI(Verdict.ADMIN, "administrator", **info)


def _safe_code(value: object) -> str:
    text = str(value)[:64]
    return text if all(c.isalnum() or c in "-_." for c in text) else "error"


def safe_error_code(value: object) -> str:
    """An OAuth error code (invalid_grant, ...) fit for a log line or a page; anything else is "error"."""
    return _safe_code(value) if value else "error"


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
