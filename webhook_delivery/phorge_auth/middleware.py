"""Phorge's access tokens never expire, so a session that Phorge signed in is re-checked with user.whoami
at most every GORGE_PHORGE_OAUTH_RECHECK_SEC, and before an action (hold, release, requeue, retry now)
when Phorge last answered more than GORGE_PHORGE_OAUTH_ACTION_RECHECK_SEC ago (`confirm_for_action`). It
ends as soon as Phorge says the user is no longer an administrator, is disabled, or refuses the token. When
Phorge gives no answer the session is kept, with one warning in the log, until the third failed re-check in
a row (about two intervals later), then it ends too; an action is refused meanwhile (its re-check needs an
answer). Every log line names the Phorge user (name and PHID) and has a stable event key (events.py).
Phorge's user.whoami answers whether or not its OAuth Server is installed (Conduit does not ask), so
sessions signed in before the OAuth Server was turned off are re-checked as usual.

A session ended here lands on /auth/phorge/ended/, which says why (the reason's key rides in the new
anonymous session, one of ENDED_WORDS).
Goes after AuthenticationMiddleware and MessageMiddleware."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from . import accounts, events
from .backends import may_use_password
from .ended import (
    DEMOTED,
    ENDED_WORDS,
    FAILED_CHECKS_KEPT,
    NO_ANSWER,
    NOT_CONFIGURED,
    NOT_STAFF,
    PASSWORD,
    SESSION_ENDED,
    UNLINKED,
)
from .models import PhorgeAccount
from .phorge import Verdict, WhoAmI, config, unseal, whoami
from .views import SESSION_PHID, SESSION_USER

logger = logging.getLogger("webhook_delivery.phorge_auth")


class PhorgeRecheckMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        session = getattr(request, "session", None)
        phid = session.get(SESSION_PHID) if session is not None else None
        ended: str | None = None
        if request.user.is_authenticated:
            if phid:
                ended = recheck(request, str(phid))
            elif config().only and not may_use_password(request.user):
                # A password session from before GORGE_PHORGE_OAUTH_ONLY (or of an account no longer allowed
                # one) ends as the login it came from would now be refused.
                logger.info(
                    "password session ended: only Phorge sign-in is allowed",
                    extra=events.about(
                        events.SESSION_ENDED, request.user.get_username(), None, reason="not a break-glass account"
                    ),
                )
                ended = _end(request, PASSWORD)
        if ended is not None and not request.path.startswith("/api/"):
            return HttpResponseRedirect(reverse("phorge_auth:ended"), status=303)
        return self.get_response(request)


def _end(request: HttpRequest, why: str) -> str:
    logout(request)
    request.session[SESSION_ENDED] = why  # the new, anonymous session: the page it lands on says why
    if hasattr(request, "_messages"):
        messages.warning(request, f"Signed out: {ENDED_WORDS[why]}")
    return why


def _account(request: HttpRequest, phid: str) -> tuple[PhorgeAccount | None, str, str | None]:
    """The linked account, the user's name for the log, and why the session must end without asking Phorge."""
    account = PhorgeAccount.objects.filter(user__pk=request.user.pk or 0, phid=phid).first()
    name = account.user_name if account is not None else str(request.session.get(SESSION_USER, ""))
    if account is None:
        return None, name, UNLINKED
    if not config().enabled:
        return account, name, NOT_CONFIGURED
    if not getattr(request.user, "is_staff", False):
        return account, name, NOT_STAFF
    return account, name, None


def _ended_without_asking(request: HttpRequest, name: str, phid: str, why: str) -> str:
    reasons = {
        UNLINKED: "no Phorge account is linked to this user any more",
        NOT_CONFIGURED: "Sign in with Phorge is no longer configured",
        NOT_STAFF: "the account is not staff any more",
    }
    logger.info("Phorge session ended: %s", reasons[why], extra=events.about(events.SESSION_ENDED, name, phid))
    return _end(request, why)


def recheck(request: HttpRequest, phid: str) -> str | None:
    """The middleware's re-check, at most every GORGE_PHORGE_OAUTH_RECHECK_SEC; why the session ended, if it did."""
    account, name, why = _account(request, phid)
    if why is not None or account is None:
        return _ended_without_asking(request, name, phid, why or UNLINKED)
    now = timezone.now()
    if account.checked_at > now - timedelta(seconds=config().recheck_sec):
        return None
    # One re-check per interval for all of this user's requests: the first to move checked_at does it.
    if not PhorgeAccount.objects.filter(pk=account.pk, checked_at=account.checked_at).update(checked_at=now):
        return None
    _verdict, ended = _ask_phorge(request, account, name, phid, now)
    return ended


def confirm_for_action(request: HttpRequest) -> tuple[bool, str | None]:
    """Before an action of a session Phorge signed in: Phorge asked again when it last answered more than
    GORGE_PHORGE_OAUTH_ACTION_RECHECK_SEC ago. (whether the action may go on, why the session ended if it
    did). A session of a local account is not Phorge's to confirm."""
    phid = request.session.get(SESSION_PHID)
    if not phid or not request.user.is_authenticated:
        return True, None
    account, name, why = _account(request, str(phid))
    if why is not None or account is None:
        return False, _ended_without_asking(request, name, str(phid), why or UNLINKED)
    now = timezone.now()
    if account.checked_at > now - timedelta(seconds=config().action_recheck_sec):
        return True, None
    PhorgeAccount.objects.filter(pk=account.pk).update(checked_at=now)
    verdict, ended = _ask_phorge(request, account, name, str(phid), now)
    if verdict is not Verdict.ADMIN and ended is None:
        # No answer: this action is refused, and the next one asks again (its check did not count).
        PhorgeAccount.objects.filter(pk=account.pk, checked_at=now).update(checked_at=account.checked_at)
    return verdict is Verdict.ADMIN, ended


def _ask_phorge(
    request: HttpRequest, account: PhorgeAccount, name: str, phid: str, now: datetime
) -> tuple[Verdict, str | None]:
    """user.whoami, and what its answer means for the session: (Phorge's verdict, why the session ended)."""
    token = unseal(account.token_encrypted)
    conf = config()
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
        return who.verdict, None
    if who.verdict is Verdict.REFUSED:
        logger.info(
            "Phorge session ended, access removed: %s",
            who.reason,
            extra=events.about(events.DEMOTED, name, phid, reason=who.reason),
        )
        accounts.revoke(phid, forget_token=True)
        return who.verdict, _end(request, DEMOTED)
    if account.unreachable_since is None:
        grace = (FAILED_CHECKS_KEPT - 1) * conf.recheck_sec
        logger.warning(
            "Phorge gives no answer to a re-check (%s): the session is kept for up to %d s more",
            who.reason,
            grace,
            extra=events.about(events.PHORGE_UNREACHABLE, name, phid, reason=who.reason),
        )
        PhorgeAccount.objects.filter(pk=account.pk).update(unreachable_since=now)
        return who.verdict, None
    if now - account.unreachable_since >= (FAILED_CHECKS_KEPT - 1) * timedelta(seconds=conf.recheck_sec):
        logger.warning(
            "Phorge session ended: Phorge gave no answer to %d re-checks",
            FAILED_CHECKS_KEPT,
            extra=events.about(events.SESSION_ENDED, name, phid, reason=f"no answer to {FAILED_CHECKS_KEPT} re-checks"),
        )
        return who.verdict, _end(request, NO_ANSWER)
    return who.verdict, None
