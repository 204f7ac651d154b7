"""The suite's one fixed clock: time that moves only when a test moves it. Call it for the time (what the
code's `clock=` and `monotonic=` arguments take); PhorgeClock moves Phorge's database clock with it."""

from __future__ import annotations

from typing import Any

from django.db.backends.signals import connection_created

from tests.support.helpers import Phorge
from webhook_delivery.config import PHORGE_ALIAS
from webhook_delivery.reads import counts, phorge_status


class FixedClock:
    """Seconds (epoch, or any origin) that change only by set() and advance()."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return float(self.now)

    def set(self, now: float) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.set(self.now + seconds)


class PhorgeClock(FixedClock):
    """A fixed clock that Phorge's side keeps too: this session's MariaDB timestamp (`SET timestamp`, what
    UNIX_TIMESTAMP() and the store read) follows every set() and advance(), and the PHP guard forgets the
    reading it caches. Assigning `now` alone moves only the host's side. release() gives the session its
    own clock back. Connections to Phorge's database opened meanwhile (the counts' refreshes open their own)
    start on this clock too."""

    def __init__(self, phorge: Phorge, now: int) -> None:
        self.phorge = phorge
        self.others: list[Any] = []  # connections opened meanwhile (the counts' refreshes keep their own)
        counts._forget_connection()  # the next refresh opens one, on this clock
        super().__init__(now)
        self.set(now)
        connection_created.connect(self._opened, weak=False, dispatch_uid=f"phorge-clock-{id(self)}")

    def _opened(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.alias == PHORGE_ALIAS and connection.vendor == "mysql":
            self.others.append(connection)
            with connection.cursor() as cursor:
                cursor.execute("SET timestamp = %s", [int(self.now)])

    def set(self, now: float) -> None:
        super().set(now)
        self.phorge.execute("SET timestamp = %s", (now,))
        for other in getattr(self, "others", []):
            if other.connection is not None:
                with other.cursor() as cursor:
                    cursor.execute("SET timestamp = %s", [int(now)])
        phorge_status._php_guard.cache_clear()  # the guard caches its reading a few seconds

    def release(self) -> None:
        connection_created.disconnect(dispatch_uid=f"phorge-clock-{id(self)}")
        self.phorge.execute("SET timestamp = DEFAULT")
        for other in self.others:
            if other.connection is not None:
                with other.cursor() as cursor:
                    cursor.execute("SET timestamp = DEFAULT")
