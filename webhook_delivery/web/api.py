"""The JSON diagnostics under /api/webhook/, compatible with the Go service gorge-webhook.

Like gorge-webhook, authentication comes before routing: every path under the prefix, known or not,
answers 401 without a valid token, and only then 404 for an unknown path, a trailing slash or a method
other than GET. Errors never carry a host, a port, SQL or a driver message.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from ..reads import alert_state as alert_selectors
from ..reads import herald as selectors
from ..reads import phorge_status, queue, replica
from ..reads.attempt_digest import HOUR, Latency
from ..reads.health import HookHealth, QueueHealth
from ..records import heartbeat, holds
from ..records.heartbeat import WorkerStatus
from ..version import VERSION
from .access import may_view

logger = logging.getLogger(__name__)


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def _authenticated(request: HttpRequest) -> bool:
    expected = settings.GORGE_WEBHOOK.service_token
    if not expected:
        return may_view(request.user)
    given = request.headers.get("X-Service-Token", "") or request.GET.get("token", "")
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


class CountsUnavailable(RuntimeError):
    """The counts of the retained requests cannot be read (Django's database is down)."""


def _stats() -> dict[str, Any]:
    counts = queue.queue_counts(settings.GORGE_WEBHOOK)
    if counts.as_of is None:
        raise CountsUnavailable
    return {
        "queuedCount": counts.queued,
        "sentCount": counts.sent,
        "failedCount": counts.failed,
        "activeWebhooks": counts.active_webhooks,
        # Added fields: the counts are exact as of this time (Phorge's database clock), complete once the
        # history has been counted once.
        "countedAt": counts.as_of,
        "countsComplete": counts.complete,
    }


def _hooks() -> dict[str, Any]:
    return {"total": selectors.hook_total()}


def _latency_json(latency: Latency, as_of: int | None) -> dict[str, Any]:
    return {
        "window_sec": int(HOUR.total_seconds()),
        "as_of": as_of,  # kept with the counts: computed again at most every 30 s, the window ending then
        "attempts": latency.attempts,
        "p50": latency.p50,
        "p95": latency.p95,
        "p99": latency.p99,
    }


def _hook_json(hook: HookHealth, health: QueueHealth, latency: Latency) -> dict[str, Any]:
    return {
        "phid": hook.phid,
        "name": hook.name,
        "status": hook.status,
        "state": hook.state,
        "misconfigured": hook.misconfigured,
        "counts": {"queued": hook.queued, "sent": hook.sent, "failed": hook.failed} if health.counts_known else None,
        "due_now": hook.due if health.counts_known else None,
        "breaker": {
            "state": "backoff" if hook.in_backoff else "closed",
            "recent_failures": hook.window_failures,
            "threshold": health.error_threshold,
            "window_sec": health.error_window_sec,
        },
        "last_success_epoch": hook.last_success,
        "last_failure_epoch": hook.last_failure,
        "errors": [{"type": e.error_type, "code": e.error_code, "count": e.count} for e in hook.errors],
        "latency_ms": _latency_json(latency, None if health.attempts is None else health.attempts.latency_at),
    }


def _worker_json(worker: WorkerStatus) -> dict[str, Any]:
    beat = worker.beat
    return {
        "worker_id": worker.worker_id,
        "version": worker.version,
        "hostname": worker.hostname,
        "pid": worker.pid,
        "started_at": worker.started_at.isoformat(),
        "last_seen": worker.last_seen.isoformat(),
        "alive": worker.alive,
        "state": worker.state,
        "in_flight": beat.in_flight,
        "max_concurrent": beat.max_concurrent,
        "database_down_for_sec": beat.database_down_for_sec,
        "hooks_in_backoff": len(beat.hooks_in_backoff),
        "hooks_misconfigured": len(beat.hooks_misconfigured),
        "hooks_lock_busy": len(beat.hooks_lock_busy),
        "degraded": beat.degraded,
        "php_task_while_delegated": None if (seen := beat.php_task_while_delegated) is None else seen.as_json(),
    }


def _versions_json(workers: list[WorkerStatus]) -> dict[str, Any]:
    running = heartbeat.versions_running(workers)
    return {"web": VERSION, "workers_alive": running, "mixed": len(running) > 1}


def _health() -> dict[str, Any]:
    health = queue.queue_health(settings.GORGE_WEBHOOK)
    workers = heartbeat.workers()
    latencies = {} if health.attempts is None else health.attempts.latency
    known = health.counts_known
    return {
        "now": health.now,
        "queue": {
            "queued": health.queued if known else None,
            "sent": health.sent if known else None,
            "failed": health.failed if known else None,
            "due_now": health.due_now if known else None,
            "due_held": health.due_held if known else None,
            "oldest_due_age_sec": health.oldest_due_age,
            "lag": health.lag_state,
            "late_after_sec": health.thresholds.late_after,
            "stalled_after_sec": health.thresholds.stalled_after,
            "counted_at": health.counted_at,
            "counted_ago_sec": health.counted_ago,
            "counts_complete": health.complete if known else None,
        },
        "hooks": [_hook_json(hook, health, latencies.get(hook.phid, Latency(0))) for hook in health.hooks],
        "workers": [_worker_json(worker) for worker in workers],
        "versions": _versions_json(workers),
        "php_worker": phorge_status.php_delivery_state().as_json(),
        "phorge_settings": {**_settings_json(), "key_status": health.key_status},
        **_partition_json(),
        **_replica_json(),
        **_operator_json(),
    }


def _replica_json() -> dict[str, Any]:
    # Only with GORGE_WEBHOOK_REPLICA_DATABASE_URL: where these figures were read, and the replica's lag.
    state = replica.state()
    return {"replica": state.as_json()} if state.configured else {}


def _partition_json() -> dict[str, Any]:
    # Only on a partitioned install: the health JSON of every other install keeps its keys.
    warning = phorge_status.partition_warning()
    return {} if warning is None else {"phorge_partitioned": {"warning": warning}}


def _operator_json() -> dict[str, Any]:
    try:
        return {
            "alerts": [alert.as_json() for alert in alert_selectors.active_alerts()],
            "alert_channels": [channel.as_json() for channel in alert_selectors.channel_states()],
            "lost_to_collection": alert_selectors.lost_totals(),
            "holds": [
                {
                    "hook": hold.hook_phid,
                    "held_by": hold.held_by,
                    "held_at": hold.held_at.isoformat(),
                    "reason": hold.reason,
                }
                for hold in holds.active_holds()
            ],
        }
    except DatabaseError:
        return {"alerts": None, "alert_channels": None, "lost_to_collection": None, "holds": None}


def _settings_json() -> dict[str, Any]:
    resolved = phorge_status.phorge_settings()
    if resolved is None:
        return {"delivery_paused": None, "php_delivery": {"state": "unknown", "why": ""}, "settings": []}
    delegation = resolved.delegation
    return {
        "delivery_paused": resolved.paused_reason(),
        "php_delivery": {"state": delegation.state, "why": delegation.why},
        "settings": [
            {"option": option, "value": shown, "source": where.source, "where": where.where}
            for option, shown, where in resolved.summary()
        ],
    }


ROUTES: dict[str, Callable[[], dict[str, Any]]] = {"stats": _stats, "hooks": _hooks, "health": _health}


@csrf_exempt  # read-only, token-authenticated; a POST must reach the 404 below, not a CSRF page
@never_cache
def dispatch(request: HttpRequest, rest: str | None = None) -> JsonResponse:
    if not _authenticated(request):
        return _error(401, "ERR_UNAUTHORIZED", "missing or invalid service token")
    route = ROUTES.get(rest or "") if request.method in ("GET", "HEAD") else None
    if route is None:
        return _error(404, "ERR_NOT_FOUND", "Not Found")
    try:
        with replica.consistent():  # every figure of one answer from the same server
            data = route()
    except Exception:
        logger.exception("diagnostics request failed", extra={"event": "api.failed", "endpoint": rest})
        return _error(500, "ERR_INTERNAL", "internal server error")
    return JsonResponse({"data": data})
