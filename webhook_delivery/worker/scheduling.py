"""Which hooks the worker's main loop hands to a delivery thread now, and in what order.

One job per hook at a time; hooks that are busy, whose lock another process holds, in Phorge's error
backoff, misconfigured or held by an operator never hold back the others, and capacity is shared out by
lanes (Lanes) so that hooks whose receivers fail or hang cannot take it all. Main thread only.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from ..phorge.herald import Hook, RequestResult
from . import metrics
from .attempts import AttemptLog
from .job import Job, JobResult
from .metrics import Counters
from .window_held import Candidate

logger = logging.getLogger(__name__)

LOCK_BUSY_SKIP_SEC = 1.0


class Lane(enum.Enum):
    """Where a job's attempts count (see Lanes)."""

    ANSWERING = "answering"  # the hook's last attempt succeeded
    NEW = "new"  # no attempt of the hook seen yet by this process
    FAILING = "failing"  # the hook's last attempt failed or timed out


class Lanes:
    """In-flight capacity shared out by what each hook's last attempt did.

    Hooks whose last attempt failed or timed out get at most a quarter of it and take turns, least
    recently tried first; with hooks this process has not heard from yet they get at most three quarters.
    So hooks that answer always find a quarter free, however many receivers hang, and a hook that answers
    for the first time is only ever behind hooks that were new at the same moment.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.failing_limit = max(1, capacity // 4)
        self.unproven_limit = max(1, capacity - capacity // 4)
        self.running: Counter[Lane] = Counter()
        self.answering: dict[str, bool] = {}
        self.last_turn: dict[str, float] = {}

    def lane(self, hook_phid: str, last_result: str) -> Lane:
        known = self.answering.get(hook_phid)
        if known is None:
            # After a restart, a row that failed last time says how its hook was doing.
            return Lane.FAILING if last_result == RequestResult.FAIL else Lane.NEW
        return Lane.ANSWERING if known else Lane.FAILING

    def admits(self, lane: Lane) -> bool:
        if self.running.total() >= self.capacity:
            return False
        unproven = self.running[Lane.FAILING] + self.running[Lane.NEW]
        if lane is Lane.FAILING:
            return self.running[Lane.FAILING] < self.failing_limit and unproven < self.unproven_limit
        if lane is Lane.NEW:
            return unproven < self.unproven_limit
        return True

    def start(self, lane: Lane, hook_phid: str) -> None:
        self.running[lane] += 1
        self.last_turn[hook_phid] = time.monotonic()

    def finish(self, lane: Lane, hook_phid: str, answered: bool | None) -> None:
        self.running[lane] -= 1
        if answered is not None:
            self.answering[hook_phid] = answered

    def order(self, candidates: list[tuple[int, str, Lane]]) -> list[tuple[str, Lane]]:
        """Failing hooks first (they are capped), least recently tried first; then new and answering hooks,
        oldest request first."""
        failing = sorted(
            (self.last_turn.get(hook, 0.0), first, hook) for first, hook, lane in candidates if lane is Lane.FAILING
        )
        others = [(hook, lane) for _first, hook, lane in candidates if lane is not Lane.FAILING]
        return [(hook, Lane.FAILING) for _turn, _first, hook in failing] + others


class Scheduler:
    """The lanes and each hook's scheduling state: which hooks may have a job now, in what order, and what
    a finished job says about its hook (lock busy, error backoff entered or left)."""

    def __init__(
        self,
        capacity: int,
        *,
        estimated_now: Callable[[], int],
        counters: Counters,
        attempts: AttemptLog | None = None,
        retry_after: Callable[[str], float | None] = lambda hook_phid: None,
        honor_retry_after: bool = False,
    ) -> None:
        self.lanes = Lanes(capacity)
        self.busy_hooks: set[str] = set()
        self._lanes_of: dict[str, Lane] = {}  # the lane of each hook's job in flight
        self.skip_until: dict[str, float] = {}
        self.wait_until: dict[str, float] = {}  # a receiver's Retry-After, on time.monotonic()
        self.backoff_until: dict[str, int] = {}
        self.misconfigured: set[str] = set()
        self.held: frozenset[str] = frozenset()  # held by an operator (manage.py hold_webhooks)
        self._estimated_now = estimated_now
        self._counters = counters
        self._attempts = attempts
        self._retry_after = retry_after  # what the hook's last answer asked for, taken once
        self._honor_retry_after = honor_retry_after

    # -- what may run ------------------------------------------------------------------------------

    def hold(self, held: frozenset[str]) -> None:
        """The hooks held by an operator now: nothing of theirs is claimed."""
        self.held = held

    def schedulable(self, hook_phid: str) -> bool:
        if hook_phid in self.busy_hooks or hook_phid in self.misconfigured or hook_phid in self.held:
            return False
        now = time.monotonic()
        if self.skip_until.get(hook_phid, 0.0) > now or self.wait_until.get(hook_phid, 0.0) > now:
            return False
        return self.backoff_until.get(hook_phid, 0) <= self._estimated_now()

    def order(self, candidates: Iterable[tuple[int, str, str]]) -> list[tuple[str, Lane]]:
        """The candidates (oldest due id, hook, that row's last result) with their lanes, in turn order."""
        return self.lanes.order([(first, hook, self.lanes.lane(hook, last)) for first, hook, last in candidates])

    def admits(self, lane: Lane) -> bool:
        return self.lanes.admits(lane)

    def full(self) -> bool:
        return self.in_flight() >= self.lanes.capacity

    def in_flight(self) -> int:
        return self.lanes.running.total()

    def note_misconfigured(self, hooks: Mapping[str, Hook], candidates: list[Candidate]) -> bool:
        """Track hooks with an empty HMAC key (never called unsigned); True if a candidate is one."""
        unsigned = {phid for phid, hook in hooks.items() if not hook.hmac_key}
        waiting = {candidate.hook for candidate in candidates}
        for phid in (unsigned - self.misconfigured) & waiting:
            logger.error(
                "hook has an empty HMAC key: its requests stay queued until a key is set",
                extra={"event": "hook.unsigned", "hook": phid, "hook_name": hooks[phid].name},
            )
        for phid in self.misconfigured - unsigned:
            logger.info(
                "hook has an HMAC key again: delivering its requests", extra={"event": "hook.signed", "hook": phid}
            )
        self.misconfigured = unsigned
        metrics.HOOKS_MISCONFIGURED.set(len(unsigned))
        return bool(unsigned & waiting)

    # -- jobs ----------------------------------------------------------------------------------------

    def start(self, job: Job, lane: Lane) -> None:
        self.busy_hooks.add(job.hook_phid)
        self._lanes_of[job.hook_phid] = lane
        self.lanes.start(lane, job.hook_phid)

    def finish(self, job: Job, result: JobResult) -> None:
        """What the finished job says about its hook; the window's part is settled by the caller."""
        self.busy_hooks.discard(job.hook_phid)
        self.lanes.finish(self._lanes_of.pop(job.hook_phid), job.hook_phid, result.answered)
        if result.lock_busy:
            self._counters.record("lock_busy")
            self.skip_until[job.hook_phid] = time.monotonic() + LOCK_BUSY_SKIP_SEC
        self._wait_as_asked(job.hook_phid)
        if result.breaker_closed and job.hook_phid in self.backoff_until:
            del self.backoff_until[job.hook_phid]
            logger.info("hook left error backoff", extra={"event": "breaker.left", "hook": job.hook_phid})
        if result.backoff_until is not None:
            self._counters.record("breaker_skips")
            if job.hook_phid not in self.backoff_until:
                logger.warning(
                    "hook entered error backoff: too many recent failures",
                    extra={"event": "breaker.entered", "hook": job.hook_phid, "until_epoch": result.backoff_until},
                )
                if self._attempts is not None:
                    self._attempts.breaker_entered(job.hook_phid, result.backoff_until)
            self.backoff_until[job.hook_phid] = result.backoff_until
        metrics.HOOKS_IN_BACKOFF.set(len(self.backoff_until))
        self.set_in_flight_metrics()

    def _wait_as_asked(self, hook_phid: str) -> None:
        """A receiver's Retry-After holds its hook back (GORGE_WEBHOOK_HONOR_RETRY_AFTER): a later claim only,
        so a failed request never goes sooner than Phorge's backoff would send it."""
        until = self._retry_after(hook_phid)
        if until is None or not self._honor_retry_after:
            return
        self.wait_until[hook_phid] = until
        logger.info(
            "hook's receiver asked to wait (Retry-After): its next call waits",
            extra={"event": "hook.retry_after", "hook": hook_phid, "wait_sec": round(until - time.monotonic(), 1)},
        )

    def set_in_flight_metrics(self) -> None:
        metrics.IN_FLIGHT.set(self.in_flight())
        for lane in Lane:
            metrics.LANE_IN_FLIGHT.labels(lane.value).set(self.lanes.running[lane])

    # -- for the heartbeat ---------------------------------------------------------------------------

    def lanes_in_flight(self) -> dict[str, int]:
        return {lane.value: self.lanes.running[lane] for lane in Lane}

    def lock_busy(self) -> list[str]:
        """Hooks skipped for now because another process holds their lock."""
        now = time.monotonic()
        return sorted(phid for phid, until in self.skip_until.items() if until > now)
