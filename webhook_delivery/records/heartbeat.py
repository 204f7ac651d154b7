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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError

from ..state import WorkerState
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
                    "state": state.as_json(),
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
        """The last beat: this process stopped, cleanly or not, at Phorge's clock `state.phorge_now`."""
        self.publish(state.retired(clean=clean))


# -- reading the heartbeats back -------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerStatus:
    """A heartbeat row as the pages, the health JSON and the alerts read it: which process, when it was heard,
    and the state its beat carried."""

    worker_id: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen: datetime
    seen_ago_sec: int
    alive: bool
    beat: WorkerState
    version: str | None = None  # None: a worker of a release before 0.2.0, which did not say

    @property
    def last_heard(self) -> int:
        """When the beat was written, on Phorge's database clock where the worker knew it."""
        return self.beat.phorge_now if self.beat.phorge_now is not None else int(self.last_seen.timestamp())

    @property
    def state(self) -> str:
        beat = self.beat
        if beat.stopped == "clean":
            return "stopped"
        if beat.stopped is not None:
            return "exited"
        if not self.alive:
            return "stale"
        if beat.database_down_for_sec is not None:
            return "database down"
        return "stopping" if beat.stopping else "ok"


def workers(now: datetime | None = None) -> list[WorkerStatus]:
    """deliver_webhooks processes seen in the last day, newest first; alive = beat in the last WORKER_ALIVE_SEC."""
    now = now or datetime.now(UTC)
    result = []
    for row in WorkerHeartbeat.objects.filter(last_seen__gte=now - WORKERS_SHOWN_FOR)[:50]:
        beat = WorkerState.from_json(row.state)
        result.append(
            WorkerStatus(
                worker_id=row.worker_id,
                hostname=row.hostname,
                pid=row.pid,
                started_at=row.started_at,
                last_seen=row.last_seen,
                seen_ago_sec=max(0, int((now - row.last_seen).total_seconds())),
                alive=beat.stopped is None and now - row.last_seen <= timedelta(seconds=WORKER_ALIVE_SEC),
                beat=beat,
                version=row.version or None,
            )
        )
    return result


def versions_running(statuses: list[WorkerStatus]) -> dict[str, int]:
    """The alive workers by version (`unknown` for one that did not say), most common first: more than one
    key means workers of two versions run at once, as in the middle of a rolling upgrade."""
    running = Counter(status.version or "unknown" for status in statuses if status.alive)
    return dict(sorted(running.items(), key=lambda item: (-item[1], item[0])))
