"""A worker's heartbeat row (default database): `Heartbeat` writes it, and its failures are logged and never
stop delivery; `workers()` reads the rows back for the pages, the JSON health and the alerts.

A worker that stops writes one last beat saying how (`stopped`: clean on SIGTERM or at the end of --once,
error when its loop died), so a stop a minute ago reads apart from silence. Rows older than a week are
pruned by the next worker to start."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DatabaseError

from ..state import TaskWhileDelegated, WorkerState
from ..version import VERSION
from .models import WorkerHeartbeat

logger = logging.getLogger(__name__)

WORKER_ALIVE_SEC = 30
WORKERS_SHOWN_FOR = timedelta(days=1)
WORKERS_KEPT_FOR = timedelta(days=7)
WORKER_ID_MAX = WorkerHeartbeat._meta.get_field("worker_id").max_length or 200


def worker_id(hostname: str, pid: int) -> str:
    """`host:pid:suffix`, readable where it is shown; the random suffix keeps a restart that reuses the pid
    (a container's pid 1) apart from the process before it. A long hostname is cut to fit the column."""
    tail = f":{pid}:{secrets.token_hex(3)}"
    return f"{hostname[: WORKER_ID_MAX - len(tail)]}{tail}"


class Heartbeat:
    def __init__(self) -> None:
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = datetime.now(UTC)
        self.worker_id = worker_id(self.hostname, self.pid)
        self._failing = False
        self._pruned = False

    def publish(self, state: WorkerState) -> None:
        try:
            if not self._pruned:
                WorkerHeartbeat.objects.filter(last_seen__lt=datetime.now(UTC) - WORKERS_KEPT_FOR).delete()
                self._pruned = True
            WorkerHeartbeat.objects.update_or_create(
                worker_id=self.worker_id,
                defaults={
                    "hostname": self.hostname,
                    "pid": self.pid,
                    "started_at": self.started_at,
                    "last_seen": datetime.now(UTC),
                    "state": state,
                    "version": VERSION,
                },
            )
            if self._failing:
                logger.info("worker heartbeat written again", extra={"event": "worker.heartbeat_written_again"})
            self._failing = False
        except DatabaseError:
            if not self._failing:
                logger.warning(
                    "cannot write the worker heartbeat to Django's database (DATABASE_URL): delivery goes on",
                    extra={"event": "worker.heartbeat_unwritable"},
                )
            self._failing = True

    def retire(self, state: WorkerState, *, clean: bool) -> None:
        """The last beat: this process stopped, cleanly or not, at Phorge's clock `state["phorge_now"]`."""
        self.publish({**state, "stopped": "clean" if clean else "error"})


# -- reading the heartbeats back -------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen: datetime
    seen_ago_sec: int
    alive: bool
    max_concurrent: int
    in_flight: int
    tracked_queued: int
    database_down_for_sec: float | None
    stopping: bool
    stopped: str | None  # "clean" or "error": the process's last beat said it stopped; None: running or silent
    phorge_now: int | None  # Phorge's database clock at the beat, as the worker estimated it
    hooks_in_backoff: int
    hooks_misconfigured: int
    hooks_lock_busy: int
    hooks_held: frozenset[str]  # the holds this process had read at the beat: it starts no call for these
    degraded: Mapping[str, int]  # cumulative counters of this process, by reason
    counts: Mapping[str, int]
    php_task_while_delegated: TaskWhileDelegated | None = None  # Phorge's side of the handover not in force
    version: str | None = None  # None: a worker of a release before 0.2.0, which did not say
    delivery_paused: str | None = None  # why this process delivers nothing (Phorge's silent mode unknown to it)

    @property
    def last_heard(self) -> int:
        """When the beat was written, on Phorge's database clock where the worker knew it."""
        return self.phorge_now if self.phorge_now is not None else int(self.last_seen.timestamp())

    @property
    def state(self) -> str:
        if self.stopped == "clean":
            return "stopped"
        if self.stopped is not None:
            return "exited"
        if not self.alive:
            return "stale"
        if self.database_down_for_sec is not None:
            return "database down"
        return "stopping" if self.stopping else "ok"


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def _count_map(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(key): int(count) for key, count in value.items() if isinstance(count, int)}


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (list, dict)) else 0


def workers(now: datetime | None = None) -> list[WorkerStatus]:
    """deliver_webhooks processes seen in the last day, newest first; alive = beat in the last WORKER_ALIVE_SEC."""
    now = now or datetime.now(UTC)
    result = []
    for beat in WorkerHeartbeat.objects.filter(last_seen__gte=now - WORKERS_SHOWN_FOR)[:50]:
        state = beat.state if isinstance(beat.state, dict) else {}
        counts = _count_map(state.get("counts"))
        down = state.get("database_down_for_sec")
        stopped = state.get("stopped")
        phorge_now = state.get("phorge_now")
        result.append(
            WorkerStatus(
                worker_id=beat.worker_id,
                hostname=beat.hostname,
                pid=beat.pid,
                started_at=beat.started_at,
                last_seen=beat.last_seen,
                seen_ago_sec=max(0, int((now - beat.last_seen).total_seconds())),
                alive=stopped is None and now - beat.last_seen <= timedelta(seconds=WORKER_ALIVE_SEC),
                max_concurrent=_int(state.get("max_concurrent")),
                in_flight=_int(state.get("in_flight")),
                tracked_queued=_int(state.get("tracked_queued")),
                database_down_for_sec=float(down) if isinstance(down, (int, float)) else None,
                stopping=bool(state.get("stopping")),
                stopped=str(stopped) if stopped in ("clean", "error") else None,
                phorge_now=phorge_now if isinstance(phorge_now, int) and not isinstance(phorge_now, bool) else None,
                hooks_in_backoff=_size(state.get("hooks_in_backoff")),
                hooks_misconfigured=_size(state.get("hooks_misconfigured")),
                hooks_lock_busy=_size(state.get("hooks_lock_busy")),
                hooks_held=frozenset(str(phid) for phid in state.get("hooks_held") or () if isinstance(phid, str)),
                degraded={k.removeprefix("degraded."): v for k, v in counts.items() if k.startswith("degraded.")},
                counts=counts,
                php_task_while_delegated=TaskWhileDelegated.from_json(state.get("php_task_while_delegated")),
                version=beat.version or None,
                delivery_paused=paused if isinstance(paused := state.get("delivery_paused"), str) else None,
            )
        )
    return result


def versions_running(statuses: list[WorkerStatus]) -> dict[str, int]:
    """The alive workers by version (`unknown` for one that did not say), most common first: more than one
    key means workers of two versions run at once, as in the middle of a rolling upgrade."""
    running = Counter(status.version or "unknown" for status in statuses if status.alive)
    return dict(sorted(running.items(), key=lambda item: (-item[1], item[0])))
