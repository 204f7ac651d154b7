"""Where a session ended by a re-check lands (/auth/phorge/ended/): a page that says why, in words of our own
chosen by the reason's key (never Phorge's text), with the way back to the login page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

SESSION_ENDED = "phorge_auth_ended"  # in the anonymous session after the end: the reason's key
FAILED_CHECKS_KEPT = 3  # the third failed re-check in a row ends the session
DEMOTED, UNLINKED, NOT_CONFIGURED, NOT_STAFF, NO_ANSWER, PASSWORD = (
    "demoted",
    "unlinked",
    "not-configured",
    "not-staff",
    "no-answer",
    "password",
)
ENDED_WORDS = {
    DEMOTED: "Phorge no longer lets you in here: it said, when asked again, that you are not a Phorge administrator "
    "(or that the account is disabled, or its sign-in revoked).",
    UNLINKED: "No Phorge account is linked to this user any more.",
    NOT_CONFIGURED: "Sign in with Phorge is no longer configured here.",
    NOT_STAFF: "This account is no longer staff here.",
    NO_ANSWER: f"Phorge could not be reached to confirm your access ({FAILED_CHECKS_KEPT} times in a row).",
    PASSWORD: "Only Sign in with Phorge is allowed here now, and this account may not use a password.",
}


@never_cache
def ended(request: HttpRequest) -> HttpResponse:
    why = request.session.pop(SESSION_ENDED, None)
    context = {
        "title": "Your session has ended" if why in ENDED_WORDS else "You are not signed in",
        "message": ENDED_WORDS.get(str(why), "Sign in to see the webhook delivery pages."),
        "reason": why if why in ENDED_WORDS else "",
        "break_glass": False,
        "site_header": "gorge-webhook",
    }
    return render(request, "phorge_auth/ended.html", context)
