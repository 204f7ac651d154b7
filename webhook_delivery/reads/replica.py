"""Where the web side reads herald: a replica (GORGE_WEBHOOK_REPLICA_DATABASE_URL) while its lag is within
GORGE_WEBHOOK_REPLICA_MAX_LAG_SEC, else herald's master. Only reads of the pages, the admin, the JSON API
and the web metrics go there; anything that decides (the alert watcher, inside `on_master()`) or writes
(the worker, requeue, holds) never does: those do not use this module, or ask for the master.

The lag is the replica's own `Seconds_Behind_Master` (`Seconds_Behind_Source` on MySQL 8), read at most
every LAG_CACHE_SEC. A replica whose lag cannot be read (no grant, not replicating, down) is not used.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections

from ..config import PHORGE_ALIAS, REPLICA_ALIAS

logger = logging.getLogger(__name__)

LAG_CACHE_SEC = 5.0
REPLICA_DOWN_SEC = 60.0  # a replica whose lag could not be read is not asked again for this long
_LAG_COLUMNS = ("Seconds_Behind_Master", "Seconds_Behind_Source")
_pinned: contextvars.ContextVar[str | None] = contextvars.ContextVar("gorge_herald_reads", default=None)


@dataclass(frozen=True)
class ReplicaState:
    """What the pages say: whether reads go to the replica now, its lag, and why not when they do not."""

    configured: bool
    in_use: bool = False
    lag_sec: int | None = None
    max_lag_sec: int = 0
    reason: str = ""
    unreachable: bool = False  # the replica did not answer: not asked again for REPLICA_DOWN_SEC

    def as_json(self) -> dict[str, Any]:
        return {"in_use": self.in_use, "lag_sec": self.lag_sec, "max_lag_sec": self.max_lag_sec, "reason": self.reason}


NO_REPLICA = ReplicaState(configured=False)
_pinned_state: contextvars.ContextVar[ReplicaState | None] = contextvars.ContextVar("gorge_replica", default=None)


class _Lag:
    """The replica's lag, cached; one reader per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: tuple[float, ReplicaState] | None = None
        self._said = ""

    def state(self) -> ReplicaState:
        if REPLICA_ALIAS not in connections.settings:
            return NO_REPLICA
        with self._lock:
            cached = self._cached
            if cached is not None and time.monotonic() - cached[0] < (
                REPLICA_DOWN_SEC if cached[1].unreachable else LAG_CACHE_SEC
            ):
                return cached[1]
            state = self._read(settings.GORGE_WEBHOOK.replica_max_lag_sec)
            self._cached = (time.monotonic(), state)
            if state.reason != self._said:
                self._said = state.reason
                if state.reason:
                    logger.warning(
                        f"pages read herald's master, not the replica: {state.reason}",
                        extra={"event": "replica.not_used"},
                    )
                else:
                    logger.info(
                        "pages read herald from the replica", extra={"event": "replica.used", "lag_sec": state.lag_sec}
                    )
            return state

    def _read(self, bound: int) -> ReplicaState:
        def unused(reason: str, lag: int | None = None, *, unreachable: bool = False) -> ReplicaState:
            return ReplicaState(configured=True, lag_sec=lag, max_lag_sec=bound, reason=reason, unreachable=unreachable)

        connection = connections[REPLICA_ALIAS]
        try:
            with connection.cursor() as cursor:
                try:
                    cursor.execute("SHOW REPLICA STATUS")
                except DatabaseError:
                    cursor.execute("SHOW SLAVE STATUS")  # before MariaDB 10.5.1 / MySQL 8.0.22
                names = [column[0] for column in cursor.description or ()]
                row = cursor.fetchone()
        except DatabaseError as exc:
            connection.close()
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            return unused(
                f"the replica's lag cannot be read (error {code}); asked again in {REPLICA_DOWN_SEC:.0f} s",
                unreachable=True,
            )
        if row is None:
            return unused("the replica database is not replicating (SHOW REPLICA STATUS is empty)")
        status = dict(zip(names, row, strict=False))
        lag = next((status[name] for name in _LAG_COLUMNS if name in status), None)
        if lag is None:
            return unused("the replica is not applying changes (its lag is unknown)")
        lag = int(lag)
        if lag > bound:
            return unused(f"the replica is {lag} s behind, more than {bound} s", lag)
        return ReplicaState(configured=True, in_use=True, lag_sec=lag, max_lag_sec=bound)


_LAG = _Lag()


def state() -> ReplicaState:
    """The replica's state as this page decided it (inside `consistent()`), else now."""
    return _pinned_state.get() or _LAG.state()


def read_alias() -> str:
    """The alias the web side reads herald from now."""
    if (pinned := _pinned.get()) is not None:
        return pinned
    if REPLICA_ALIAS not in connections.settings:
        return PHORGE_ALIAS
    return REPLICA_ALIAS if _LAG.state().in_use else PHORGE_ALIAS


@contextmanager
def consistent() -> Iterator[str]:
    """One decision for everything inside (one page, one JSON answer): every read goes where the state it
    shows says, even when the lag is read afresh halfway through."""
    if (pinned := _pinned.get()) is not None:
        yield pinned
        return
    current = _LAG.state()
    alias = REPLICA_ALIAS if current.in_use else PHORGE_ALIAS
    tokens = (_pinned.set(alias), _pinned_state.set(current))
    try:
        yield alias
    finally:
        _pinned.reset(tokens[0])
        _pinned_state.reset(tokens[1])


@contextmanager
def reading(alias: str) -> Iterator[None]:
    """Every herald read inside goes to `alias` (one transaction's statements stay on one server)."""
    token = _pinned.set(alias)
    try:
        yield
    finally:
        _pinned.reset(token)


def on_master() -> AbstractContextManager[None]:
    """Every herald read inside goes to herald's master (decisions are made on what is, not on a copy)."""
    return reading(PHORGE_ALIAS)
