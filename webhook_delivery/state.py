"""What one process tells another, typed once for the writer and the reader: a worker's heartbeat state
(written every few seconds into Django's own database, read by the dashboard and /api/webhook/health),
and the PHP-guard state (Phorge's own worker still delivering?)."""

from __future__ import annotations

from typing import Literal, Required, TypedDict

PhpState = Literal["idle", "active", "recent", "unknown"]


class PhpDeliveryState(TypedDict, total=False):
    """phorge_lookups.PhpWorkerGuard.state(); only `state` is always there."""

    state: Required[PhpState]
    active_tasks: int | None
    leased_tasks: int | None
    recently_archived: int | None
    last_delivery: int | None  # epoch of the newest task phd finished in the last 15 minutes
    detail: str


class WorkerState(TypedDict):
    """worker.Worker.snapshot(): the heartbeat's `state` column. Read back tolerantly: an older worker may
    have written fewer keys."""

    version: int
    max_concurrent: int
    in_flight: int
    lanes: dict[str, int]
    tracked_queued: int
    counts: dict[str, int]
    database_down_for_sec: float | None
    hooks_in_backoff: dict[str, int]
    hooks_misconfigured: list[str]
    hooks_held: list[str]  # held by an operator (manage.py hold_webhooks): their requests stay queued
    hooks_lock_busy: list[str]
    stopping: bool
    php_worker: PhpDeliveryState
    delivery_paused: str | None  # why the worker delivers nothing (Phorge's silent mode unknown)
