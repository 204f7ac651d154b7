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

import logging
from typing import Any

import requests
from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
from django.conf import settings
from django.contrib.auth import login, logout
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from . import accounts, events
from .config import PhorgeOAuthConfig
from .phorge import TIMEOUT_SEC, PhorgeUnknown, Verdict, config, oauth_app, safe_error_code, whoami

logger = logging.getLogger("webhook_delivery.phorge_auth")

SESSION_PHID = "phorge_auth_phid"  # set on a session that Phorge signed in: the middleware re-checks it
SESSION_USER = "phorge_auth_user"  # the Phorge user name at sign-in, for the log lines of the session
SESSION_NEXT = "phorge_auth_next"
PROBE_TIMEOUT_SEC = 5
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


def _probe(app: Any) -> int | None:
    """The HTTP status of Phorge's auth endpoint (None: no answer), so that a Phorge outage gets this
    service's page (with the break-glass hint) instead of the browser's "cannot connect", and an OAuth
    Server that is not installed gets its own page instead of Phorge's 404."""
    try:
        probe = requests.get(app.authorize_url, timeout=PROBE_TIMEOUT_SEC, allow_redirects=False)
    except requests.RequestException:
        return None
    probe.close()
    return probe.status_code


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
        app = oauth_app(conf)
    except PhorgeUnknown:
        return _page(
            request,
            503,
            "Phorge's address is not known",
            "Set GORGE_PHORGE_OAUTH_URL (or let this service read Phorge's phabricator.base-uri).",
        )
    status = _probe(app)
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
    request.session[SESSION_NEXT] = wanted if safe else ""
    response: HttpResponse = app.authorize_redirect(request, redirect_uri(request, conf))
    return response


@never_cache
@require_GET
def callback(request: HttpRequest) -> HttpResponse:
    conf = _enabled()
    wanted = str(request.session.pop(SESSION_NEXT, "") or "")
    try:
        app = oauth_app(conf)
        token = app.authorize_access_token(request, timeout=TIMEOUT_SEC)
    except PhorgeUnknown:
        logout(request)
        return _unreachable(request)
    except MismatchingStateError:
        logger.warning(
            "Phorge sign-in refused: the state does not match one this browser started",
            extra=events.event(events.REFUSED, reason="state mismatch"),
        )
        logout(request)
        return _page(
            request,
            400,
            "This sign-in was not started here",
            "The answer from Phorge does not belong to a sign-in this browser started (its state does not "
            "match), or it was already used. Start again from the login page.",
        )
    except OAuthError as error:
        code = safe_error_code(error.error)
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
    except ValueError:
        logger.warning(
            "Phorge sign-in failed: the token endpoint's answer is not OAuth JSON",
            extra=events.event(events.PHORGE_UNREACHABLE, reason="token endpoint: not OAuth JSON"),
        )
        logout(request)
        return _unreachable(request)
    except requests.RequestException as error:
        logger.warning(
            "Phorge sign-in failed: Phorge is unreachable (%s)",
            type(error).__name__,
            extra=events.event(events.PHORGE_UNREACHABLE, reason=f"token endpoint: {type(error).__name__}"),
        )
        logout(request)
        return _unreachable(request)
    access_token = token.get("access_token") if isinstance(token, dict) else None
    if not isinstance(access_token, str) or not access_token:
        logger.warning(
            "Phorge sign-in failed: the token endpoint gave no access token",
            extra=events.event(events.PHORGE_UNREACHABLE, reason="token endpoint: no access token"),
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
