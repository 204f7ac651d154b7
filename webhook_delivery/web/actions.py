"""Acting from the pages: hold and release a hook, requeue its failed requests (after a dry run) or one failed
request; retry now is in retry_now.py. Each action is a plain HTML form (POST, Django's CSRF token) that
writes one pending action in Django's own database (records/actions.py) and nothing else: the web process
writes none of Phorge's rows, and needs no grant on them beyond the SELECTs of its pages. A worker carries
the action out within a second or so and records what came of it; the hook's page shows it pending, then
done.

Only staff with `operate webhooks` (access.may_operate) may act; anyone else gets a worded 403 and nothing is
written. A session Phorge signed in is confirmed with Phorge first when its last answer is older than
GORGE_PHORGE_OAUTH_ACTION_RECHECK_SEC (phorge_auth/middleware.confirm_for_action). Every form carries a key
of its own, so a double submit is one action; the same action already waiting for a worker is refused (409);
requeues are capped per action (requeue_rules.CAP_PER_ACTION, as the command asks first above it); and each
kind is limited per user (records.actions.PER_USER within WINDOW), counted in one step with the write.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from gorge_site.client_ip import client_ip

from ..phorge.config import REQUEST_RETENTION_SEC
from ..phorge.herald import RequestStatus
from ..phorge_auth.middleware import confirm_for_action
from ..reads import herald as selectors
from ..reads import phorge_status
from ..reads.requeue_preview import RequeuePreview, requeue_preview
from ..records import actions, holds
from ..requeue_rules import CAP_PER_ACTION, LATEST, ErrorFilter, RequeueError, parse_when
from .access import OPERATE_WORDS, forbidden, may_operate, view_required

logger = logging.getLogger(__name__)

IDS_RE = re.compile(rf"[0-9]{{1,20}}(,[0-9]{{1,20}}){{0,{CAP_PER_ACTION - 1}}}")
MOMENT_RE = re.compile(r"[0-9]{1,12}")
ERRORS_MAX = 10
STALE_FORM = "This form is out of date (or was not sent whole): reload the page and try again."


class Refused(Exception):
    """An action refused before anything was written: the message is safe to show, the status says why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def operate_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous: to the login page, nothing done; signed in without `operate webhooks`: the worded 403,
    nothing done; a Phorge session Phorge no longer confirms: ended, nothing done, the page says why."""

    @functools.wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not may_operate(user):
            return forbidden(
                request,
                missing=OPERATE_WORDS,
                doing="hold, release, requeue or retry from these pages",
                nothing_done=True,
                event="action.forbidden",
            )
        name = user.get_username()
        try:
            confirmed, ended = confirm_for_action(request)
        except DatabaseError:
            confirmed, ended = False, None
        if ended is not None:
            logger.warning(
                "action refused: Phorge no longer confirms the user",
                extra={"event": "action.refused_by_phorge", "user": name, "client": client_ip(request)},
            )
            return HttpResponseRedirect(reverse("phorge_auth:ended"), status=303)
        if not confirmed:
            logger.warning(
                "action refused: Phorge could not confirm the user",
                extra={"event": "action.unconfirmed", "user": name, "client": client_ip(request)},
            )
            return _refused(
                request,
                "Phorge could not be asked whether you are still a Phorge administrator (it gave no answer): "
                "nothing was done. Try again in a moment.",
                503,
            )
        try:
            return view(request, *args, **kwargs)
        except Refused as refused:
            logger.info("action refused", extra={"event": "action.refused", "user": name, "reason": str(refused)})
            return _refused(request, str(refused), refused.status)
        except DatabaseError as exc:
            logger.warning(
                "action: a database is unavailable",
                extra={"event": "action.database_unavailable", "error": type(exc).__name__},
            )
            return _refused(request, "A database cannot be read or written now: nothing was done. Try again.", 503)

    return never_cache(require_POST(checked))


def _refused(request: HttpRequest, message: str, status: int) -> HttpResponse:
    back = "/".join(request.path.split("/")[:3]) + "/"  # /hooks/<phid>/ or /requests/<phid>/
    context = {**page_context(request), "message": message, "back": back}
    return render(request, "webhook_delivery/action_refused.html", context, status=status)


def _form_key(request: HttpRequest) -> str:
    key = request.POST.get("form_key", "")
    if not actions.FORM_KEY_RE.fullmatch(key):
        raise Refused(STALE_FORM)
    return key


ALREADY = {
    actions.HOLD: "A hold of this hook is waiting for a worker already",
    actions.RELEASE: "A release of this hook is waiting for a worker already",
    actions.REQUEUE: "A requeue of {what} is waiting for a worker already",
    actions.RETRY: "A retry now of this hook is waiting for a worker already",
}


def ask(request: HttpRequest, kind: str, hook_phid: str, *, to: str, **fields: Any) -> HttpResponse:
    """Write the pending action (once per form) and go back to the page that shows it."""
    key = _form_key(request)
    user = request.user.get_username()
    try:
        action, created = actions.ask(
            kind, form_key=key, requested_by=user, requested_from=client_ip(request), hook_phid=hook_phid, **fields
        )
    except actions.DuplicateForm:
        raise Refused(STALE_FORM) from None
    except actions.AlreadyPending as pending:
        what = "this request" if fields.get("request_phid") else "this hook's failed requests"
        raise Refused(
            f"{ALREADY[kind].format(what=what)} (asked by {pending.action.requested_by} at "
            f"{pending.action.requested_at:%H:%M:%S} UTC): nothing more was written.",
            status=409,
        ) from None
    except actions.Limited as limited:
        raise Refused(
            f"{str(limited).capitalize()}: nothing was done. Ask again after {limited.again_at:%H:%M:%S} UTC.",
            status=429,
        ) from None
    if created:
        logger.info(
            f"operator asked for a {kind}",
            extra={
                "event": "action.requested",
                "action": action.id,
                "kind": kind,
                "hook": hook_phid,
                "request": fields.get("request_phid") or None,
                "user": user,
                "client": action.requested_from,
            },
        )
    return HttpResponseRedirect(f"{to}#actions", status=303)


def hook_row(phid: str) -> selectors.HookRow:
    _now, found = selectors.hooks(only=[phid])
    if not found:
        raise Http404("no such hook")
    return found[0]


@operate_required
def hold(request: HttpRequest, phid: str) -> HttpResponse:
    try:
        reason = holds.check_reason(request.POST.get("reason", ""))
    except holds.HoldError as exc:
        raise Refused(f"Not held: {exc}.") from None
    hook_row(phid)
    return ask(request, actions.HOLD, phid, reason=reason, to=reverse("webhook_delivery:hook", args=[phid]))


@operate_required
def release(request: HttpRequest, phid: str) -> HttpResponse:
    # A hook gone from Phorge may still be held: its hold can be released all the same.
    if holds.hold_of(phid) is None:
        _now, found = selectors.hooks(only=[phid])
        raise Refused(
            "This hook is not held: there is nothing to release."
            if found
            else "There is no such hook in Phorge, and no hold on it: there is nothing to release.",
            status=409 if found else 404,
        )
    return ask(request, actions.RELEASE, phid, to=reverse("webhook_delivery:hook", args=[phid]))


def _moment(value: str, what: str) -> int | None:
    if not value:
        return None
    if not MOMENT_RE.fullmatch(value) or int(value) > LATEST:
        raise Refused(f"{STALE_FORM} ({what})")
    return int(value)


def _errors(values: list[str]) -> list[ErrorFilter]:
    wanted = [part for value in values for part in re.split(r"[\s,]+", value) if part]
    if len(wanted) > ERRORS_MAX:
        raise RequeueError(f"at most {ERRORS_MAX} errors at once")
    return list(dict.fromkeys(ErrorFilter.parse(value) for value in wanted))


@operate_required
def requeue(request: HttpRequest, phid: str) -> HttpResponse:
    """The dry run's confirmation: exactly the requests it showed, with its choices."""
    ids = request.POST.get("ids", "")
    if not IDS_RE.fullmatch(ids):
        raise Refused(STALE_FORM)
    try:
        errors = _errors(request.POST.getlist("error"))
    except RequeueError:
        raise Refused(STALE_FORM) from None
    choices = {
        "since": _moment(request.POST.get("since", ""), "since"),
        "until": _moment(request.POST.get("until", ""), "until"),
        "errors": [str(error) for error in errors],
        "ids": sorted({int(row_id) for row_id in ids.split(",")}),
    }
    hook_row(phid)
    return ask(request, actions.REQUEUE, phid, choices=choices, to=reverse("webhook_delivery:hook", args=[phid]))


@operate_required
def requeue_request(request: HttpRequest, phid: str) -> HttpResponse:
    detail = selectors.request_detail(phid)
    if detail is None:
        raise Http404("no such request")
    if detail.row.status != RequestStatus.FAILED:
        raise Refused(f"This request is {detail.row.status}, not failed: nothing to requeue.", status=409)
    return ask(
        request,
        actions.REQUEUE,
        detail.row.webhook_phid,
        request_phid=phid,
        choices={"ids": [detail.row.id]},
        to=reverse("webhook_delivery:request", args=[phid]),
    )


def hook_requeue(request: HttpRequest, phid: str) -> HttpResponse:
    """GET: the dry run, for anyone who may see the pages; POST: the requeue, for operators."""
    return requeue(request, phid) if request.method == "POST" else requeue_dry_run(request, phid)


@view_required
@never_cache
@require_safe
def requeue_dry_run(request: HttpRequest, phid: str) -> HttpResponse:
    """What a requeue of this hook's failed requests with these choices would put back; changes nothing."""
    since_text, until_text = request.GET.get("since", "").strip(), request.GET.get("until", "").strip()
    error_text = " ".join(request.GET.getlist("error")).strip()
    context: dict[str, Any] = {"phid": phid, "since": since_text, "until": until_text, "error": error_text}
    now, found = selectors.hooks(only=[phid])
    if not found:
        raise Http404("no such hook")
    context["hook"] = found[0]
    try:
        errors = _errors([error_text])
        since = parse_when(since_text, now) if since_text else None
        until = parse_when(until_text, now) if until_text else None
        if since is not None and until is not None and since > until:
            raise RequeueError("since is after until: nothing can match")
    except RequeueError as exc:
        context["problem"] = str(exc).removeprefix("--error ")
        return render(request, "webhook_delivery/requeue.html", {**page_context(request), **context}, status=400)
    resolved = phorge_status.phorge_settings()
    retention = REQUEST_RETENTION_SEC if resolved is None else resolved.retention.value
    preview: RequeuePreview = requeue_preview(
        found[0], now, since=since, until=until, errors=errors, retention=retention
    )
    context.update(
        preview=preview,
        ids=",".join(str(row.id) for row in preview.shown),
        form_key=actions.new_form_key(),
        since_epoch="" if since is None else since,
        until_epoch="" if until is None else until,
        errors=[str(error) for error in errors],
    )
    return render(request, "webhook_delivery/requeue.html", {**page_context(request), **context})


def page_context(request: HttpRequest) -> dict[str, Any]:
    return {
        **admin.site.each_context(request),
        "is_nav_sidebar_enabled": False,
        "may_operate": may_operate(request.user),
        "cap": CAP_PER_ACTION,
    }
