"""Sign in with Phorge: /auth/phorge/login/ sends the browser to Phorge's /oauthserver/auth/, Phorge sends
it back to /auth/phorge/callback/ with a code and the state, the code becomes a token at Phorge's
/oauthserver/token/, and Conduit's user.whoami says whether its holder is a Phorge administrator.

Every failure ends on a short page that says what to do, never a traceback, and with no signed-in session.
The code, the token and the client secret appear in no page and no log line.
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

from . import accounts
from .config import PhorgeOAuthConfig
from .phorge import TIMEOUT_SEC, PhorgeUnknown, Verdict, config, oauth_app, safe_error_code, whoami

logger = logging.getLogger("webhook_delivery.phorge_auth")

SESSION_PHID = "phorge_auth_phid"  # set on a session that Phorge signed in: the middleware re-checks it
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


def _answers(app: Any) -> bool:
    """Whether Phorge's auth endpoint answers at all, so that a Phorge outage gets this service's page
    (with the break-glass hint) instead of the browser's "cannot connect"."""
    try:
        probe = requests.get(app.authorize_url, timeout=PROBE_TIMEOUT_SEC, allow_redirects=False)
    except requests.RequestException:
        return False
    probe.close()
    return probe.status_code < 500


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
    if not _answers(app):
        logger.warning("Phorge sign-in not started: Phorge's OAuth server does not answer")
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
        logger.warning("Phorge sign-in refused: the state does not match one this browser started")
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
        logger.warning("Phorge sign-in refused by Phorge's OAuth server: %s", code)
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
        logger.warning("Phorge sign-in failed: the token endpoint's answer is not OAuth JSON")
        logout(request)
        return _unreachable(request)
    except requests.RequestException as error:
        logger.warning("Phorge sign-in failed: Phorge is unreachable (%s)", type(error).__name__)
        logout(request)
        return _unreachable(request)
    access_token = token.get("access_token") if isinstance(token, dict) else None
    if not isinstance(access_token, str) or not access_token:
        logger.warning("Phorge sign-in failed: the token endpoint gave no access token")
        logout(request)
        return _unreachable(request)

    who = whoami(access_token, conf)
    if who.verdict is Verdict.UNREACHABLE:
        logger.warning("Phorge sign-in failed: user.whoami gave no answer (%s)", who.reason)
        logout(request)
        return _unreachable(request)
    if who.verdict is Verdict.REFUSED:
        logger.info("Phorge sign-in refused for %s: %s", who.phid or "an unknown user", who.reason)
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
    logger.info("Phorge administrator %s signed in", who.phid)
    return HttpResponseRedirect(wanted or resolve_url(settings.LOGIN_REDIRECT_URL))
