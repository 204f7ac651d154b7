"""The main loop's one hand-off to Django's database: the heartbeat it writes, the holds and requeue notices it
reads, the operators' pending actions it carries out (actions.py, looked for about once a second), all done
by a thread of its own, so that neither the loop nor any delivery ever waits on that database (Phorge's
queue does not depend on it, so delivery must not either).

The loop hands each heartbeat over and goes on: one state waits at most (a newer one replaces it, and the
beat it replaced is counted, `degraded.heartbeat_behind`, and said once while it lasts); it reads the holds
and notices this thread last read (the last holds read stay in force meanwhile, as when the database fails).
Locked, full or gone, Django's database then costs delivery nothing; what could not be written is said by
the records themselves (records/heartbeat.py, records/holds.py), once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from django.db import connections

from ..state import WorkerState
from .parts import Actions, HeartbeatSink, Holds, Notices, Retries

logger = logging.getLogger(__name__)

CLOSE_WAIT_SEC = 10.0  # at the stop, how long the last beat may take before the process goes without it
ACTIONS_SEC = 1.0  # how often the operators' pending actions are looked for (one indexed read)


class SiteRecords:
    def __init__(
        self,
        heartbeat: HeartbeatSink,
        holds: Holds,
        notices: Notices,
        *,
        held: frozenset[str],
        period: float,
        behind: Callable[[], None] = lambda: None,
        actions: Actions | None = None,
        retries: Retries | None = None,
        retrying: Mapping[str, int] | None = None,
    ) -> None:
        self._heartbeat = heartbeat
        self._holds = holds
        self._notices = notices
        self._actions = actions
        self._retries = retries
        self._retrying: Mapping[str, int] = retrying or {}
        self._period = period
        self._tick = period if actions is None else min(period, ACTIONS_SEC)
        self._behind = behind  # counts a beat replaced before it was written
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending: WorkerState | None = None
        self._last: tuple[WorkerState, bool] | None = None  # the last beat: the state, and whether it stopped cleanly
        self._held = held
        self._taken: dict[str, int] = {}
        self._said_behind = False
        self._thread = threading.Thread(target=self._run, name="site-records", daemon=True)
        self._thread.start()

    # -- the loop's side: never blocks on the database ---------------------------------------------------

    def beat(self, state: WorkerState) -> None:
        """Hand a heartbeat over; a beat still waiting is replaced by this newer one."""
        with self._lock:
            replaced = self._pending is not None
            self._pending = state
            say = replaced and not self._said_behind
            self._said_behind = self._said_behind or replaced
        if replaced:
            self._behind()
        if say:
            logger.warning(
                "Django's database is slow to take the worker's heartbeat: beats are skipped, delivery goes on",
                extra={"event": "worker.heartbeat_behind"},
            )
        self._wake.set()

    def held(self) -> frozenset[str]:
        """The held hooks, as last read."""
        with self._lock:
            return self._held

    def retrying(self) -> Mapping[str, int]:
        """The Retry now orders in force, as last read: {hook PHID: failed up to}."""
        with self._lock:
            return self._retrying

    def take_notices(self) -> dict[str, int]:
        """The requeue notices read since the last call: {hook PHID: lowest requeued id}."""
        with self._lock:
            taken, self._taken = self._taken, {}
        return taken

    def close(self, state: WorkerState, *, clean: bool) -> None:
        """The last beat (the process stopped, cleanly or not), then the thread's end; waits CLOSE_WAIT_SEC
        at most for Django's database."""
        with self._lock:
            self._pending = None
            self._last = (state, clean)
        self._stop.set()
        self._wake.set()
        self._thread.join(CLOSE_WAIT_SEC)
        if self._thread.is_alive():
            logger.warning(
                "Django's database did not take the worker's last heartbeat in time: stopping without it",
                extra={"event": "worker.last_heartbeat_lost"},
            )

    # -- the thread's side -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            due = 0.0
            while not self._stop.is_set():
                woken = self._wake.wait(self._tick)
                self._wake.clear()
                if self._stop.is_set():
                    break
                # An action carried out changes the holds, the retry orders or leaves notices: read them at once.
                acted = self._actions is not None and self._actions.carry_out()
                if woken or acted or time.monotonic() >= due:
                    due = time.monotonic() + self._period
                    self._once()
            with self._lock:
                last = self._last
            if last is not None:
                self._heartbeat.retire(last[0], clean=last[1])
        finally:
            connections.close_all()  # this thread's own connections

    def _once(self) -> None:
        with self._lock:
            state, self._pending = self._pending, None
        if state is not None:
            self._heartbeat.publish(state)
            with self._lock:
                back = self._said_behind and self._pending is None
                self._said_behind = self._said_behind and not back
            if back:
                logger.info("worker heartbeat caught up", extra={"event": "worker.heartbeat_caught_up"})
        held = self._holds.refresh()
        notices = self._notices.take()
        retrying = self._retries.refresh() if self._retries is not None else None
        with self._lock:
            self._held = held
            if retrying is not None:
                self._retrying = retrying
            for hook_phid, lowest in notices.items():
                self._taken[hook_phid] = min(self._taken.get(hook_phid, lowest), lowest)
