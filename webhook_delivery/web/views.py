"""Thin views: the staff dashboard, the hook and request pages, the probes and the web metrics. Every read
is in selectors.py (Phorge's tables), phorge_status.py (Phorge's settings and PHP worker), object_names.py
(the names of Phorge's objects), records/heartbeat.py (the heartbeats), records/actions.py (the operators'
actions) or history.py (the attempt log); dashboard.py composes the dashboard. The forms that act are in
actions.py."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..phorge.config import REQUEST_RETENTION_SEC
from ..reads import alert_state as alert_selectors
from ..reads import herald as selectors
from ..reads import object_names, phorge_status, queue
from ..reads.health import HookHealth
from ..records import actions, holds
from ..records.heartbeat import WORKER_ALIVE_SEC
from ..version import VERSION
from . import history, links, retry_now
from .access import may_operate, view_required
from .action_list import shown_actions
from .dashboard import dashboard as read_dashboard
from .metrics import REGISTRY

logger = logging.getLogger(__name__)
REFRESH_SEC = 30
UNAVAILABLE_REFRESH_SEC = 15


def _context(request: HttpRequest) -> dict[str, Any]:
    return {**admin.site.each_context(request), "is_nav_sidebar_enabled": False}


def _unavailable(request: HttpRequest, page: str, exc: DatabaseError) -> HttpResponse:
    logger.warning(
        f"{page}: Phorge's herald database unavailable",
        extra={"event": "page.phorge_unavailable", "page": page, "error": type(exc).__name__},
    )
    context = {**_context(request), "refresh_sec": UNAVAILABLE_REFRESH_SEC}
    return render(request, "webhook_delivery/unavailable.html", context, status=503)


@view_required
@never_cache
def dashboard(request: HttpRequest) -> HttpResponse:
    try:
        board = read_dashboard(settings.GORGE_WEBHOOK)
    except DatabaseError as exc:
        return _unavailable(request, "dashboard", exc)
    context = {
        **_context(request),
        "board": board,
        "health": board.health,
        "refresh_sec": REFRESH_SEC,
        "worker_alive_sec": WORKER_ALIVE_SEC,
        "request_retention_sec": REQUEST_RETENTION_SEC,
        "version": VERSION,
        **_operator_state(hooks=board.health.hooks),
        **_actions(),
    }
    return render(request, "webhook_delivery/dashboard.html", context)


@dataclass(frozen=True)
class HeldHook:
    """A hold, with the hook's name and Phorge id where Phorge still has the hook."""

    hold: holds.Hold
    name: str | None
    hook_id: int | None


def _held(found: Iterable[holds.Hold], hooks: Iterable[HookHealth]) -> list[HeldHook]:
    by_phid = {hook.phid: hook for hook in hooks}
    return [
        HeldHook(hold, by_phid[hold.hook_phid].name, by_phid[hold.hook_phid].id)
        if hold.hook_phid in by_phid
        else HeldHook(hold, None, None)
        for hold in found
    ]


def _actions(*, hook_phid: str | None = None, request_phid: str | None = None) -> dict[str, Any]:
    return shown_actions(hook_phid=hook_phid, request_phid=request_phid)


def _forms(request: HttpRequest) -> dict[str, Any]:
    """Whether this user may act here, and a key for each form the page shows (a double submit is one action)."""
    if not may_operate(request.user):
        return {"may_operate": False}
    return {"may_operate": True, "hold_key": actions.new_form_key(), "requeue_key": actions.new_form_key()}


def _operator_state(hook_phid: str | None = None, *, hooks: Iterable[HookHealth] = ()) -> dict[str, Any]:
    """What Django's own database says beside Phorge's: alerts active, holds, requests lost to Phorge's
    collection (for one hook, or all). Left out, never a 500, when that database cannot be read."""
    try:
        alerts = alert_selectors.active_alerts()
        if hook_phid is None:
            return {
                "alerts": alerts,
                "holds": _held(holds.active_holds(), hooks),
                "alert_channels": alert_selectors.channel_states(),
            }
        hold = holds.hold_of(hook_phid)
        return {
            "alerts": [alert for alert in alerts if alert.hook_phid == hook_phid],
            "holds": _held([] if hold is None else [hold], hooks),
            "lost_to_collection": alert_selectors.lost_total(hook_phid),
        }
    except DatabaseError as exc:
        logger.warning(
            "Django's database unavailable for alerts and holds",
            extra={"event": "page.site_unavailable", "error": type(exc).__name__},
        )
        return {}


@view_required
@never_cache
@require_safe
def hook_page(request: HttpRequest, phid: str) -> HttpResponse:
    """One hook: its queue in Phorge, and what each recent attempt did (from the attempt log)."""
    config = settings.GORGE_WEBHOOK
    try:
        health = queue.queue_health(config, only=[phid])
        base = phorge_status.phorge_base_uri()
    except DatabaseError as exc:
        return _unavailable(request, "hook page", exc)
    past = history.hook_history(phid)
    if not health.hooks and not past.on_record:
        raise Http404("no such hook")
    context = {
        **_context(request),
        "phid": phid,
        "hook": health.hooks[0] if health.hooks else None,
        "health": health,
        "history": past,
        "phorge_uri": base,
        "retention": config,
        **_operator_state(phid, hooks=health.hooks),
        **_actions(hook_phid=phid),
        **_forms(request),
        **retry_now.hook_part(request, phid),
    }
    return render(request, "webhook_delivery/hook.html", context)


@view_required
@never_cache
@require_safe
def request_page(request: HttpRequest, phid: str) -> HttpResponse:
    """One request: its row as Phorge holds it, and each attempt on record as a timeline."""
    try:
        row = selectors.request_detail(phid)
        base = phorge_status.phorge_base_uri()
    except DatabaseError as exc:
        return _unavailable(request, "request page", exc)
    attempts = history.request_attempts(phid)
    if row is None and not attempts:
        raise Http404("no such request")
    config = settings.GORGE_WEBHOOK
    object_name = None if row is None else object_names.object_names([row.row.object_phid]).get(row.row.object_phid)
    context = {
        **_context(request),
        "phid": phid,
        "detail": row,
        "object_link": None if object_name is None else links.object_link(object_name, base),
        "attempts": attempts,
        "writer": _last_result_writer(row, attempt_log=config.attempt_log),
        "match_sec": history.MATCH_SEC,
        "hook_phid": row.row.webhook_phid if row else attempts[0].hook_phid,
        "phorge_uri": base,
        "retention": config,
        "request_retention_sec": REQUEST_RETENTION_SEC,
        **_actions(request_phid=phid),
        **_forms(request),
    }
    return render(request, "webhook_delivery/request.html", context)


def _last_result_writer(detail: selectors.RequestDetail | None, *, attempt_log: bool) -> str:
    """Who wrote the row's last result: "ours", "php" (Phorge's PHP worker, or this service before its
    log kept the attempt), "none" (no result yet) or "unknown" (no log to compare with)."""
    if detail is None:
        return "none"
    ours = history.last_result_is_ours(detail.row)
    if ours is None:
        return "none"
    if ours:
        return "ours"
    return "php" if attempt_log else "unknown"


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    try:
        phorge_status.phorge_database_answers()
    except DatabaseError as exc:
        logger.warning(
            "readiness: Phorge's herald database unavailable",
            extra={"event": "readiness.phorge_unavailable", "error": type(exc).__name__},
        )
        return JsonResponse({"status": "unavailable", "reason": "phorge database unreachable"}, status=503)
    resolved = phorge_status.phorge_settings()
    paused = None if resolved is None else resolved.paused_reason()
    # Whether Phorge hands delivery to this service (contrib/phorge): Phorge's setup check compares it.
    delegation = "unknown" if resolved is None else resolved.delegation.state
    if paused is not None:
        return JsonResponse({"status": "unavailable", "reason": paused, "php_delivery": delegation}, status=503)
    body = {"status": "ok", "php_delivery": delegation}
    silent = resolved is not None and resolved.silent.value is True
    warnings = [
        "phabricator.silent is on: requests are failed (hook/silent) without a call" if silent else None,
        phorge_status.partition_warning(),
    ]
    php = phorge_status.php_delivery_state()
    if php.state == "active" and delegation != "delegated":
        warnings.append("Phorge's PHP worker is also delivering webhooks")  # as the dashboard says it
    elif php.state == "active" and php.active_tasks:  # left over: with the patch a task that ran delivered nothing
        warnings.append("Phorge still has PHP webhook tasks although delivery is delegated")
    if said := [warning for warning in warnings if warning]:
        body["warning"] = "; ".join(said)
    return JsonResponse(body)


@require_safe
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
