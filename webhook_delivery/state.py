"""What one process tells another, typed once for the writer and the reader: a worker's heartbeat state
(written every few seconds into Django's own database, read by the dashboard and /api/webhook/health),
the PHP-guard state (Phorge's own worker still delivering?) and a PHP task seen while delivery is delegated."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Required, TypedDict, cast, get_args

PhpState = Literal["idle", "active", "recent", "unknown"]
Stopped = Literal["clean", "error"]


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


def _int(value: Any) -> int:
    return _count(value) or 0


def _count_map(value: Any) -> dict[str, int]:
    """A {name: count} map; an older beat's list of names counts each as 0."""
    if isinstance(value, list):
        return dict.fromkeys(_names(value), 0)
    if not isinstance(value, Mapping):
        return {}
    return {str(key): count for key, raw in value.items() if (count := _count(raw)) is not None}


def _names(value: Any) -> tuple[str, ...]:
    return tuple(name for name in value if isinstance(name, str)) if isinstance(value, (list, tuple, dict)) else ()


STATE_VERSION = 1  # the `version` key of the JSON: its shape, not the release that wrote it


@dataclass(frozen=True)
class WorkerState:
    """A worker's state at one beat: what worker.loop.Worker.snapshot() takes, the heartbeat row's `state` column
    holds (`as_json`) and the pages, the health JSON and the alerts read back (`from_json`). Read back
    tolerantly: a worker of an older release wrote fewer keys, and a value not of its type reads as unsaid."""

    max_concurrent: int = 0
    in_flight: int = 0
    lanes: Mapping[str, int] = field(default_factory=dict)  # deliveries in flight by lane
    tracked_queued: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)  # the process's cumulative counters
    database_down_for_sec: float | None = None
    hooks_in_backoff: Mapping[str, int] = field(default_factory=dict)  # hook PHID: until, on Phorge's clock
    hooks_misconfigured: tuple[str, ...] = ()
    hooks_held: tuple[str, ...] = ()  # held by an operator (manage.py hold_webhooks): their requests stay queued
    hooks_lock_busy: tuple[str, ...] = ()
    stopping: bool = False
    php_worker: PhpDelivery = field(default_factory=lambda: PhpDelivery.unknown(""))
    delivery_paused: str | None = None  # why the worker delivers nothing (Phorge's silent mode unknown)
    php_task_while_delegated: TaskWhileDelegated | None = None  # the last one this process saw
    phorge_now: int | None = None  # Phorge's database clock at this beat, as the worker estimates it
    stopped: Stopped | None = None  # the last beat: SIGTERM or the end of --once, or its loop died

    @property
    def degraded(self) -> dict[str, int]:
        """The counters of degraded operation, by reason."""
        return {key.removeprefix("degraded."): n for key, n in self.counts.items() if key.startswith("degraded.")}

    def retired(self, *, clean: bool) -> WorkerState:
        """This state as the last beat of a process that stopped, cleanly or not."""
        return replace(self, stopped="clean" if clean else "error")

    def as_json(self) -> dict[str, Any]:
        """The heartbeat's `state` column; its keys and types are what every release since 0.2.0 reads."""
        data: dict[str, Any] = {
            "version": STATE_VERSION,
            "max_concurrent": self.max_concurrent,
            "in_flight": self.in_flight,
            "lanes": dict(self.lanes),
            "tracked_queued": self.tracked_queued,
            "counts": dict(self.counts),
            "database_down_for_sec": self.database_down_for_sec,
            "hooks_in_backoff": dict(self.hooks_in_backoff),
            "hooks_misconfigured": list(self.hooks_misconfigured),
            "hooks_held": list(self.hooks_held),
            "hooks_lock_busy": list(self.hooks_lock_busy),
            "stopping": self.stopping,
            "php_worker": self.php_worker.as_json(),
            "delivery_paused": self.delivery_paused,
            "php_task_while_delegated": None if (seen := self.php_task_while_delegated) is None else seen.as_json(),
            "phorge_now": self.phorge_now,
        }
        if self.stopped is not None:
            data["stopped"] = self.stopped
        return data

    @classmethod
    def from_json(cls, data: Any) -> WorkerState:
        if not isinstance(data, Mapping):
            data = {}
        down, paused, stopped = data.get("database_down_for_sec"), data.get("delivery_paused"), data.get("stopped")
        php = data.get("php_worker")
        return cls(
            max_concurrent=_int(data.get("max_concurrent")),
            in_flight=_int(data.get("in_flight")),
            lanes=_count_map(data.get("lanes")),
            tracked_queued=_int(data.get("tracked_queued")),
            counts=_count_map(data.get("counts")),
            database_down_for_sec=float(down)
            if isinstance(down, (int, float)) and not isinstance(down, bool)
            else None,
            hooks_in_backoff=_count_map(data.get("hooks_in_backoff")),
            hooks_misconfigured=_names(data.get("hooks_misconfigured")),
            hooks_held=_names(data.get("hooks_held")),
            hooks_lock_busy=_names(data.get("hooks_lock_busy")),
            stopping=bool(data.get("stopping")),
            php_worker=PhpDelivery.from_json(php if isinstance(php, Mapping) else {}),
            delivery_paused=paused if isinstance(paused, str) else None,
            php_task_while_delegated=TaskWhileDelegated.from_json(data.get("php_task_while_delegated")),
            phorge_now=_count(data.get("phorge_now")),
            stopped=cast(Stopped, stopped) if stopped in get_args(Stopped) else None,
        )
