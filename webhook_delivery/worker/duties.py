"""The main loop's periodic duties, each named and on its own timing (Procrastinate's worker is the model: its
`_start_side_tasks` names each task beside the loop).

Each duty runs between two polls, on the main thread: what they touch (the scheduler, the queue window, the
lock session's checks) is the main thread's own, so they take no lock; anything that may wait on a database
other than Phorge's has a thread of its own (site_records.py) and a duty only hands over to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Every:
    """`run` at most once each `interval` seconds (0: between every two polls), the first time at once."""

    name: str
    interval: float
    run: Callable[[], object]  # what it returns is not used
    last: float = float("-inf")  # on time.monotonic(): when it last ran

    def due(self, now: float) -> bool:
        return now - self.last >= self.interval


class Duties:
    """The loop's duties, run in the order given, each when it is due."""

    def __init__(self, *duties: Every, clock: Callable[[], float] = time.monotonic) -> None:
        self.duties = duties
        self.clock = clock

    def run_due(self) -> None:
        for duty in self.duties:
            now = self.clock()
            if duty.due(now):
                duty.last = now
                duty.run()


class Throttle:
    """Says whether something repeated may be said again: at once, then once each `interval` seconds."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._said = float("-inf")

    def ready(self) -> bool:
        now = self.clock()
        if now - self._said < self.interval:
            return False
        self._said = now
        return True
