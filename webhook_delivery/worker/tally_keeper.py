"""The tally's refreshes, done by a long-running worker beside its work (reads/counts.py): a thread of its own,
with its own connections, that never holds up a delivery. Whichever worker's turn it is refreshes; the others
find the turn taken and wait for the next one. A refresh that fails is said once, and tried again.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connections

from ..config import DeliveryConfig
from ..reads import counts

logger = logging.getLogger(__name__)

IDLE_SEC = 1.0  # how often a worker whose turn it is not looks again
RETRY_MAX_SEC = 30.0
START_SEC = 1.0  # the first look, once the worker's own start-up is done
KEEP_CONNECTION_SEC = 60.0  # a worker whose turn it has not been for this long holds no connection for it


class TallyKeeper:
    def __init__(self, config: DeliveryConfig) -> None:
        self.config = config
        self.stopping = threading.Event()
        self._failing = False
        self._refreshed = 0.0  # when this worker last refreshed (monotonic)
        self._thread = threading.Thread(target=self._run, name="tally-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_sec: float = 5.0) -> None:
        self.stopping.set()
        if self._thread.is_alive():
            self._thread.join(wait_sec)

    def _run(self) -> None:
        wait = START_SEC
        try:
            while not self.stopping.wait(wait):
                wait = self._once()
        finally:
            counts.forget_connection()
            connections.close_all()  # this thread's own

    def _once(self) -> float:
        try:
            done = counts.refresh(self.config, role="worker")
        except DatabaseError as exc:
            if not self._failing:
                logger.warning(
                    "the counts of Phorge's retained requests could not be refreshed: the pages show the last ones",
                    extra={"event": "tally.refresh_failed", "error": type(exc).__name__},
                )
            self._failing = True
            for alias in connections:
                connections[alias].close_if_unusable_or_obsolete()
            return RETRY_MAX_SEC
        except Exception:  # a bug here must not stop delivery: said, and tried again later
            logger.exception("the counts' refresh failed", extra={"event": "tally.refresh_error"})
            return RETRY_MAX_SEC
        if self._failing:
            self._failing = False
            logger.info("the counts are refreshed again", extra={"event": "tally.refresh_back"})
        if done is None:
            if time.monotonic() - self._refreshed > KEEP_CONNECTION_SEC:
                counts.forget_connection()  # other processes refresh: hold no connection of Phorge's for it
            return IDLE_SEC
        self._refreshed = time.monotonic()
        return max(done.next_in, IDLE_SEC if done.complete else 0.05)
