"""What one process tells another, typed once for the writer and the reader: a worker's heartbeat state
(written every few seconds into Django's own database, read by the dashboard and /api/webhook/health),
the PHP-guard state (Phorge's own worker still delivering?) and a PHP task seen while delivery is delegated."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Required, TypedDict, cast, get_args

PhpState = Literal["idle", "active", "recent", "unknown"]


class PhpDeliveryState(TypedDict, total=False):
    """The JSON shape of PhpDelivery (PhpDelivery.as_json()); only `state` is always there."""

    state: Required[PhpState]
    active_tasks: int | None
    leased_tasks: int | None
    recently_archived: int | None
    last_delivery: int | None  # epoch of the newest task phd finished in the last 15 minutes
    detail: str


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class PhpDelivery:
    """php_guard.PhpWorkerGuard's answer: is Phorge's own PHP worker delivering webhooks, and what says so.
    The counts are None where they could not be read."""

    state: PhpState
    active_tasks: int | None
    leased_tasks: int | None
    recently_archived: int | None
    last_delivery: int | None
    detail: str

    @classmethod
    def unknown(cls, detail: str) -> PhpDelivery:
        """Phorge's worker tables could not be read: never taken for "idle"."""
        return cls("unknown", None, None, None, None, detail)

    @property
    def delivering(self) -> bool:
        """PHP delivered lately ("active" or "recent"): requests too young to tell are left to it."""
        return self.state in ("active", "recent")

    def handed_over(self) -> PhpDelivery:
        """What this is while Phorge's settings say delivery is delegated to this service: a task phd ran then
        only left its request queued for this service (contrib/phorge's guard), so tasks that ran are no PHP
        delivery; tasks still in Phorge's queue keep it "active" (their requests are left to PHP until then)."""
        if self.state not in ("active", "recent") or self.active_tasks:
            return self
        ran = f"{self.recently_archived or 0} run by phd lately only left their requests to this service (delegated)"
        return PhpDelivery(
            "idle", self.active_tasks, self.leased_tasks, self.recently_archived, None, f"{self.detail}; {ran}"
        )

    def as_json(self) -> PhpDeliveryState:
        """The dict written into the heartbeat and /api/webhook/health."""
        return {
            "state": self.state,
            "active_tasks": self.active_tasks,
            "leased_tasks": self.leased_tasks,
            "recently_archived": self.recently_archived,
            "last_delivery": self.last_delivery,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhpDelivery:
        """Read back tolerantly: an older heartbeat may lack keys, and what is not a known value is unknown."""
        state = data.get("state")
        detail = data.get("detail")
        return cls(
            cast(PhpState, state) if state in get_args(PhpState) else "unknown",
            _count(data.get("active_tasks")),
            _count(data.get("leased_tasks")),
            _count(data.get("recently_archived")),
            _count(data.get("last_delivery")),
            detail if isinstance(detail, str) else "",
        )


class TaskWhileDelegatedState(TypedDict):
    """The JSON shape of TaskWhileDelegated."""

    request: str
    created: int
    seen: int


@dataclass(frozen=True)
class TaskWhileDelegated:
    """A request created while Phorge's settings said delivery is delegated to this service that got a
    HeraldWebhookWorker task anyway: Phorge's side of the handover is missing or not in force. Times on
    Phorge's database clock: when the request was created, and when a worker saw its task."""

    request: str
    created: int
    seen: int

    def as_json(self) -> TaskWhileDelegatedState:
        return {"request": self.request, "created": self.created, "seen": self.seen}

    @classmethod
    def from_json(cls, data: Any) -> TaskWhileDelegated | None:
        """Read back tolerantly: None unless the beat carries one whole."""
        if not isinstance(data, Mapping):
            return None
        request, created, seen = data.get("request"), _count(data.get("created")), _count(data.get("seen"))
        if not isinstance(request, str) or created is None or seen is None:
            return None
        return cls(request, created, seen)


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
    php_task_while_delegated: TaskWhileDelegatedState | None  # the last one this process saw
    phorge_now: int  # Phorge's database clock at this beat, as the worker estimates it
    stopped: NotRequired[str]  # the last beat: "clean" (SIGTERM, or the end of --once) or "error"
