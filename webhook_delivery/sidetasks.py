"""A side task of a long-running command, supervised (Procrastinate's worker is the model: `_start_side_tasks`
starts its side tasks beside the main loop, `_monitor_side_tasks` notices one that ends).

`deliver_webhooks --watch` runs the alert watcher so, in a thread of its own. A side task is meant to run
until the command stops it; if it ends before (an exception escaped it, or it returned), that is said
(`side_task.died`) and it is started again after a wait that doubles. Dying once more after RESTARTS
restarts within WINDOW_SEC means it will not stay up: it is given up (`side_task.gave_up`), the command is told
(`on_give_up`: the worker stops claiming and finishes what is in flight) and exits non-zero, rather than
delivering on without the alerts it was asked to send.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

RESTARTS = 3  # restarts within WINDOW_SEC: the next death gives the task up
WINDOW_SEC = 600.0
FIRST_WAIT_SEC = 1.0  # before the first restart; doubled for each death still in the window


class SideTask:
    def __init__(
        self,
        name: str,
        run: Callable[[threading.Event], None],
        *,
        on_give_up: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.run = run  # runs until the Event it is given is set
        self.on_give_up = on_give_up
        self.clock = clock
        self.stopping = threading.Event()
        self.deaths: list[float] = []  # when it died, within the window
        self.given_up = False
        self._thread = threading.Thread(target=self._supervise, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, wait_sec: float = 0.0) -> None:
        """Ask the task to stop; wait at most `wait_sec` for it (a daemon thread: the process need not)."""
        self.stopping.set()
        if self._thread.is_alive():
            self._thread.join(wait_sec)

    def _supervise(self) -> None:
        ended = False
        try:
            while not self.stopping.is_set():
                error = self._run_once()
                if self.stopping.is_set():
                    break
                wait = self._died(error)
                if wait is None:
                    break
                self.stopping.wait(wait)
            ended = True
        finally:
            if not ended and not self.given_up:  # something no `except` takes ended the supervisor itself
                self._give_up("BaseException")

    def _run_once(self) -> str:
        """Run the task until it ends; what ended it, by kind."""
        try:
            self.run(self.stopping)
        except Exception as exc:  # any failure of the task is a death, said and counted
            logger.exception("side task %s died", self.name, extra={"event": "side_task.died", "task": self.name})
            return type(exc).__name__
        if not self.stopping.is_set():
            logger.error(
                "side task %s ended on its own", self.name, extra={"event": "side_task.died", "task": self.name}
            )
        return "returned"

    def _died(self, error: str) -> float | None:
        """Count a death; the wait before the next start, None when given up."""
        now = self.clock()
        self.deaths = [when for when in self.deaths if now - when < WINDOW_SEC] + [now]
        if len(self.deaths) > RESTARTS:
            self._give_up(error)
            return None
        wait: float = FIRST_WAIT_SEC * 2.0 ** (len(self.deaths) - 1)
        logger.warning(
            "side task %s restarts in %g s",
            self.name,
            wait,
            extra={"event": "side_task.restarting", "task": self.name, "error": error, "deaths": len(self.deaths)},
        )
        return wait

    def _give_up(self, error: str) -> None:
        self.given_up = True
        logger.critical(
            "side task %s died %d times in %g s: given up, the process stops",
            self.name,
            max(len(self.deaths), 1),
            WINDOW_SEC,
            extra={"event": "side_task.gave_up", "task": self.name, "error": error},
        )
        self.on_give_up()
