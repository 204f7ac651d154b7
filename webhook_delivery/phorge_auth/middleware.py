"""Phorge's access tokens never expire, so a session that Phorge signed in is re-checked with user.whoami
at most every GORGE_PHORGE_OAUTH_RECHECK_SEC. It ends as soon as Phorge says the user is no longer an
administrator, is disabled, or refuses the token. When Phorge gives no answer the session is kept, with one
warning in the log, until the third failed re-check in a row (about two intervals later), then it ends too.
Every log line names the Phorge user (name and PHID) and has a stable event key (events.py). Phorge's
user.whoami answers whether or not its OAuth Server is installed (Conduit does not ask), so sessions
signed in before the OAuth Server was turned off are re-checked as usual.
Goes after AuthenticationMiddleware and MessageMiddleware."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from . import accounts, events
from .backends import may_use_password
from .models import PhorgeAccount
from .phorge import Verdict, WhoAmI, config, unseal, whoami
from .views import SESSION_PHID, SESSION_USER

logger = logging.getLogger("webhook_delivery.phorge_auth")
FAILED_CHECKS_KEPT = 3  # the third failed re-check in a row ends the session


class PhorgeRecheckMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        session = getattr(request, "session", None)
        phid = session.get(SESSION_PHID) if session is not None else None
        if request.user.is_authenticated:
            if phid:
                recheck(request, str(phid))
            elif config().only and not may_use_password(request.user):
                # A password session from before GORGE_PHORGE_OAUTH_ONLY (or of an account no longer allowed
                # one) ends as the login it came from would now be refused.
                logger.info(
                    "password session ended: only Phorge sign-in is allowed",
                    extra=events.about(
                        events.SESSION_ENDED, request.user.get_username(), None, reason="not a break-glass account"
                    ),
                )
                _end(request, "Only Sign in with Phorge is allowed here now. Sign in again.")
        return self.get_response(request)


def _end(request: HttpRequest, message: str) -> None:
    logout(request)
    if hasattr(request, "_messages"):
        messages.warning(request, message)


def recheck(request: HttpRequest, phid: str) -> None:
    conf = config()
    account = PhorgeAccount.objects.filter(user__pk=request.user.pk or 0, phid=phid).first()
    name = account.user_name if account is not None else str(request.session.get(SESSION_USER, ""))
    if account is None or not conf.enabled or not getattr(request.user, "is_staff", False):
        if account is None:
            reason = "no Phorge account is linked to this user any more"
        elif not conf.enabled:
            reason = "Sign in with Phorge is no longer configured"
        else:
            reason = "the account is not staff any more"
        logger.info("Phorge session ended: %s", reason, extra=events.about(events.SESSION_ENDED, name, phid))
        _end(request, "Your Phorge sign-in has ended. Sign in again.")
        return
    interval = timedelta(seconds=conf.recheck_sec)
    now = timezone.now()
    if account.checked_at > now - interval:
        return
    # One re-check per interval for all of this user's requests: the first to move checked_at does it.
    if not PhorgeAccount.objects.filter(pk=account.pk, checked_at=account.checked_at).update(checked_at=now):
        return
    token = unseal(account.token_encrypted)
    who = whoami(token, conf) if token else WhoAmI(Verdict.REFUSED, "no usable stored token")
    if who.verdict is Verdict.ADMIN and who.phid != account.phid:
        who = WhoAmI(Verdict.REFUSED, "the token belongs to another Phorge user")

    name = who.user_name or name  # Phorge's name now, when it said; else the one stored at sign-in

    if who.verdict is Verdict.ADMIN:
        if who.user_name and who.user_name != account.user_name:  # renamed in Phorge: the log lines follow
            PhorgeAccount.objects.filter(pk=account.pk).update(user_name=who.user_name)
        if account.unreachable_since is not None:
            logger.info(
                "Phorge answers again: still an administrator", extra=events.about(events.PHORGE_ANSWERS, name, phid)
            )
            PhorgeAccount.objects.filter(pk=account.pk).update(unreachable_since=None)
        return
    if who.verdict is Verdict.REFUSED:
        logger.info(
            "Phorge session ended, access removed: %s",
            who.reason,
            extra=events.about(events.DEMOTED, name, phid, reason=who.reason),
        )
        accounts.revoke(phid, forget_token=True)
        _end(request, "Phorge no longer lets you in here (you must be a Phorge administrator). Signed out.")
        return
    if account.unreachable_since is None:
        grace = (FAILED_CHECKS_KEPT - 1) * conf.recheck_sec
        logger.warning(
            "Phorge gives no answer to a re-check (%s): the session is kept for up to %d s more",
            who.reason,
            grace,
            extra=events.about(events.PHORGE_UNREACHABLE, name, phid, reason=who.reason),
        )
        PhorgeAccount.objects.filter(pk=account.pk).update(unreachable_since=now)
        return
    if now - account.unreachable_since >= (FAILED_CHECKS_KEPT - 1) * interval:
        logger.warning(
            "Phorge session ended: Phorge gave no answer to %d re-checks",
            FAILED_CHECKS_KEPT,
            extra=events.about(events.SESSION_ENDED, name, phid, reason=f"no answer to {FAILED_CHECKS_KEPT} re-checks"),
        )
        _end(request, "Phorge could not be reached to confirm your access. Signed out; sign in again later.")
