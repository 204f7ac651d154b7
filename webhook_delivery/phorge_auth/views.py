"""Sign in with Phorge: /auth/phorge/login/ sends the browser to Phorge's /oauthserver/auth/, Phorge sends
it back to /auth/phorge/callback/ with a code and the state, the code becomes a token at Phorge's
/oauthserver/token/, and Conduit's user.whoami says whether its holder is a Phorge administrator.

Every failure ends on a short page that says what to do, never a traceback, and with no signed-in session.
The code, the token and the client secret appear in no page and no log line. Each log line has a stable
event key and names the Phorge user (name and PHID) once Phorge has said who it is (events.py).

Phorge's OAuth Server is a prototype application: while `phabricator.show-prototypes` is off (Phorge's
default), or the application is uninstalled, Phorge answers 404 for /oauthserver/auth/ and
/oauthserver/token/ (it routes installed applications only), which gets a page of its own here.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import time

from django.conf import settings
from django.contrib.auth import login, logout
from django.core import signing
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .. import answers, outbound
from . import accounts, events
from .config import PhorgeOAuthConfig
from .phorge import (
    PhorgeSilent,
    PhorgeUnknown,
    TokenRefused,
    Verdict,
    authorize_redirect,
    config,
    endpoints,
    exchange_code,
    whoami,
)

logger = logging.getLogger("webhook_delivery.phorge_auth")

SESSION_PHID = "phorge_auth_phid"  # set on a session that Phorge signed in: the middleware re-checks it
SESSION_USER = "phorge_auth_user"  # the Phorge user name at sign-in, for the log lines of the session
# The sign-in under way (its state and where to go after) rides in a signed cookie, not in the session, so
# that a stranger's visit to the login view writes no session row.
STARTED_COOKIE = "gorge_phorge_signin"
STARTED_SALT = "webhook_delivery.phorge_auth.started"
STARTED_MAX_AGE = 600
PROBE_TIMEOUT_SEC = 3
PROBE_CACHE_SEC = 30  # Phorge is asked at most this often whether its OAuth server answers
PROBE_FAILED_CACHE_SEC = 5  # ... and, after it did not, again this soon (it may just have been fixed)
BACKEND = "webhook_delivery.phorge_auth.backends.LocalPasswordBackend"


def redirect_uri(request: HttpRequest, conf: PhorgeOAuthConfig) -> str:
    """The one redirect URI, sent to Phorge's auth endpoint and again to its token endpoint."""
    path = reverse("phorge_auth:callback")
    if conf.site_url:
        return conf.site_url.rstrip("/") + path
    return request.build_absolute_uri(path)


def _page(request: HttpRequest, status: int, title: str, message: str, *, break_glass: bool = False) -> HttpResponse:
    response = render(
        request,
        "phorge_auth/refused.html",
        {"title": title, "message": message, "break_glass": break_glass, "site_header": "gorge-webhook"},
        status=status,
    )
    response["Referrer-Policy"] = "no-referrer"  # the callback's address holds the code
    return response


def _unreachable(request: HttpRequest) -> HttpResponse:
    return _page(
        request,
        503,
        "Phorge cannot be reached",
        "Sign in with Phorge needs Phorge to answer, and it does not right now. Try again later; an "
        "operator with a local break-glass account can still sign in with a password.",
        break_glass=True,
    )


def _enabled() -> PhorgeOAuthConfig:
    conf = config()
    if not conf.enabled:
        raise Http404("Sign in with Phorge is not configured")
    return conf


_probed: dict[str, tuple[float, int | None]] = {}
_probe_lock = threading.Lock()


def forget_probes() -> None:
    """Ask Phorge again at the next sign-in (after its configuration changed)."""
    with _probe_lock:
        _probed.clear()


def _probe(url: str) -> int | None:
    """The HTTP status of Phorge's auth endpoint (None: no answer), cached PROBE_CACHE_SEC per process: a
    Phorge outage gets this service's page (with the break-glass hint) rather than the browser's "cannot
    connect", an OAuth Server that is not installed a page of its own; and a stream of strangers costs
    Phorge one question per half minute, a hung Phorge each web worker at most PROBE_TIMEOUT_SEC."""
    with _probe_lock:
        known = _probed.get(url)
        if known is not None:
            fine = known[1] is not None and known[1] < 400
            if time.monotonic() - known[0] < (PROBE_CACHE_SEC if fine else PROBE_FAILED_CACHE_SEC):
                return known[1]
    try:
        status: int | None = outbound.get(url, timeout=PROBE_TIMEOUT_SEC, max_bytes=4096).status
    except outbound.OutboundError:
        status = None
    with _probe_lock:
        _probed[url] = (time.monotonic(), status)
    return status


def _oauth_server_missing(request: HttpRequest) -> HttpResponse:
    return _page(
        request,
        503,
        "Phorge's OAuth Server is not installed",
        "Phorge answers 404 Not Found for its OAuth Server, so Sign in with Phorge cannot start. Whoever "
        "administers Phorge must enable it (it is a prototype application: bin/config set "
        "phabricator.show-prototypes true). An operator with a local break-glass account can still sign "
        "in with a password.",
        break_glass=True,
    )


@never_cache
@require_GET
def start(request: HttpRequest) -> HttpResponse:
    conf = _enabled()
    try:
        authorize_url = endpoints(conf).authorize_url
    except PhorgeUnknown as exc:
        logger.warning(
            "Phorge sign-in not started: %s", exc, extra=events.event(events.PHORGE_UNREACHABLE, reason=str(exc))
        )
        return _page(request, 503, "Phorge's address is not known", f"{exc}.")
    status = _probe(authorize_url)
    if status == 404:
        logger.warning(
            "Phorge sign-in not started: Phorge answers 404 for its OAuth Server, a prototype application "
            "(enable it in Phorge: bin/config set phabricator.show-prototypes true; and it must not be in "
            "phabricator.uninstalled-applications), or GORGE_PHORGE_OAUTH_URL is not Phorge's address",
            extra=events.event(events.OAUTH_SERVER_MISSING, reason="HTTP 404"),
        )
        return _oauth_server_missing(request)
    if status is None or status >= 500:
        reason = "no answer" if status is None else f"HTTP {status}"
        logger.warning(
            "Phorge sign-in not started: Phorge's OAuth server does not answer",
            extra=events.event(events.PHORGE_UNREACHABLE, reason=reason),
        )
        return _unreachable(request)
    wanted = request.GET.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    state = secrets.token_urlsafe(32)
    response = HttpResponseRedirect(authorize_redirect(conf, redirect_uri(request, conf), state))
    response.set_cookie(
        STARTED_COOKIE,
        signing.dumps({"state": state, "next": wanted if safe else ""}, salt=STARTED_SALT, compress=True),
        max_age=STARTED_MAX_AGE,
        secure=request.is_secure(),
        httponly=True,
        samesite="Lax",  # Phorge sends the browser back with a top-level GET: the cookie goes along
        path=reverse("phorge_auth:callback"),
    )
    return response


def _started(request: HttpRequest) -> dict[str, str] | None:
    """The sign-in this browser started (its state and next), None when there is none or it is not ours."""
    raw = request.COOKIES.get(STARTED_COOKIE)
    if not raw:
        return None
    try:
        value = signing.loads(raw, salt=STARTED_SALT, max_age=STARTED_MAX_AGE)
    except (signing.BadSignature, ValueError):  # SignatureExpired is a BadSignature
        return None
    if not isinstance(value, dict) or not isinstance(value.get("state"), str):
        return None
    return {"state": value["state"], "next": str(value.get("next") or "")}


def _forget_started(response: HttpResponse) -> HttpResponse:
    response.delete_cookie(STARTED_COOKIE, path=reverse("phorge_auth:callback"), samesite="Lax")
    return response


@never_cache
@require_GET
def callback(request: HttpRequest) -> HttpResponse:
    return _forget_started(_callback(request))


def _callback(request: HttpRequest) -> HttpResponse:
    conf = _enabled()
    started = _started(request)
    given = request.GET.get("state", "")
    if started is None or not hmac.compare_digest(started["state"].encode(), given.encode()):
        # Not the answer to a sign-in this browser started: refused, and whatever session it has is left
        # alone (else any link to the callback would sign its visitor out).
        logger.warning(
            "Phorge sign-in refused: the state does not match one this browser started",
            extra=events.event(events.REFUSED, reason="state mismatch"),
        )
        return _page(
            request,
            400,
            "This sign-in was not started here",
            "The answer from Phorge does not belong to a sign-in this browser started (its state does not "
            "match), or it was already used. Start again from the login page.",
        )
    wanted = started["next"]
    if request.GET.get("error"):
        return _refused_by_oauth(request, answers.oauth_code(request.GET.get("error")))
    try:
        access_token = exchange_code(conf, request.GET.get("code", ""), redirect_uri(request, conf))
    except PhorgeUnknown:
        logout(request)
        return _unreachable(request)
    except TokenRefused as refused:
        return _refused_by_oauth(request, refused.code)
    except PhorgeSilent as silent:
        logger.warning(
            "Phorge sign-in failed: %s",
            silent,
            extra=events.event(events.PHORGE_UNREACHABLE, reason=str(silent)),
        )
        logout(request)
        return _unreachable(request)

    who = whoami(access_token, conf)
    if who.verdict is Verdict.UNREACHABLE:
        logger.warning(
            "Phorge sign-in failed: user.whoami gave no answer (%s)",
            who.reason,
            extra=events.event(events.PHORGE_UNREACHABLE, reason=f"user.whoami: {who.reason}"),
        )
        logout(request)
        return _unreachable(request)
    if who.verdict is Verdict.REFUSED:
        if who.phid:
            logger.info(
                "Phorge sign-in refused: %s",
                who.reason,
                extra=events.about(events.REFUSED, who.user_name, who.phid, reason=who.reason),
            )
        else:  # Phorge refused the token itself (ERR-INVALID-AUTH, ...): it named no user
            logger.info("Phorge sign-in refused: %s", who.reason, extra=events.event(events.REFUSED, reason=who.reason))
        if who.phid:
            accounts.revoke(who.phid, forget_token=True)
        logout(request)
        return _page(
            request,
            403,
            "Phorge administrators only",
            "You must be a Phorge administrator (and not disabled in Phorge) to sign in here. Your Phorge "
            "account is not one; ask a Phorge administrator if you need access.",
        )

    user = accounts.admit(who, access_token)
    login(request, user, backend=BACKEND)
    request.session[SESSION_PHID] = who.phid
    request.session[SESSION_USER] = who.user_name
    logger.info("Phorge administrator signed in", extra=events.about(events.SIGNED_IN, who.user_name, who.phid))
    return HttpResponseRedirect(wanted or resolve_url(settings.LOGIN_REDIRECT_URL))


def _refused_by_oauth(request: HttpRequest, code: str) -> HttpResponse:
    logger.warning(
        "Phorge sign-in refused by Phorge's OAuth server: %s",
        code,
        extra=events.event(events.REFUSED, reason=f"OAuth error {code}"),
    )
    logout(request)
    return _page(
        request,
        400,
        "Phorge refused the sign-in",
        f"Phorge's OAuth server answered {code}. The sign-in link may have expired or been used "
        "already, or the OAuth client is registered with another redirect URI. Start again from the "
        "login page; if it keeps failing, ask whoever administers Phorge to check the OAuth client.",
    )
