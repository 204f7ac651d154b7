"""The health and lag model of Phorge's queue: per-hook states, the lag thresholds, and the tally that
folds the grouped counts of selectors.queue_health into them. Pure: no database, no Django.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from ..config import DeliveryConfig

if TYPE_CHECKING:
    from .attempt_digest import Digest

LagState = Literal["healthy", "late", "stalled"]
HookState = Literal["ok", "failing", "backoff", "misconfigured", "disabled"]


@dataclass(frozen=True)
class ErrorCount:
    error_type: str
    error_code: str
    count: int


@dataclass(frozen=True)
class HookHealth:
    phid: str
    name: str
    id: int
    status: str
    misconfigured: bool
    queued: int = 0
    sent: int = 0
    failed: int = 0
    due: int = 0
    oldest_due_since: int | None = None
    window_failures: int = 0  # attempts failed inside the breaker window (Phorge's rule)
    in_backoff: bool = False
    last_success: int | None = None
    last_failed_attempt: int | None = None  # lastRequestEpoch of the newest `fail` row
    last_configuration_failure: int | None = None  # dateModified of the newest failed/none row (hook error)
    errors: tuple[ErrorCount, ...] = ()
    on_hold: bool = False  # held by an operator (manage.py hold_webhooks)

    @property
    def last_failure(self) -> int | None:
        return _latest(self.last_failed_attempt, self.last_configuration_failure)

    @property
    def held(self) -> bool:
        """Due requests of this hook wait on purpose (breaker, missing key or a hold), not on the worker."""
        return self.misconfigured or self.in_backoff or self.on_hold

    @property
    def state(self) -> HookState:
        if self.status == "disabled":
            return "disabled"
        if self.misconfigured:
            return "misconfigured"
        if self.in_backoff:
            return "backoff"
        # Only what the receiver did: a refused URI or a deleted object is the request's, not the receiver's.
        if self.last_failed_attempt is not None and (
            self.last_success is None or self.last_failed_attempt >= self.last_success
        ):
            return "failing"
        return "ok"


@dataclass(frozen=True)
class LagThresholds:
    late_after: int
    stalled_after: int


def lag_thresholds(config: DeliveryConfig) -> LagThresholds:
    """When the oldest due request is late, and when delivery looks stalled (seconds).

    A due request is normally claimed within one poll interval; with every slot busy it can wait behind
    deliveries that each take up to the delivery timeout. So it is late after the largest of 30 s,
    twenty poll intervals and two delivery timeouts. It is stalled once it has waited longer than
    Phorge itself holds back a failing request (the retry backoff) or a crashed worker's claim (the
    lease), and never before twice the late threshold: by then no worker is taking due requests.
    Defaults (250 ms poll, 15 s timeout, 300 s backoff, 60 s lease): late after 30 s, stalled after 300 s.
    """
    late = max(30, math.ceil(config.poll_interval_ms / 50), math.ceil(2 * config.delivery_timeout))
    return LagThresholds(late, max(2 * late, config.retry_backoff_sec, config.claim_lease_sec))


@dataclass(frozen=True)
class QueueHealth:
    """`now` is when the hooks and their latest facts were read; the counts (queued, sent, failed, errors, due
    and lag) are the tally's, exact as of `counted_at` (both on Phorge's database clock)."""

    now: int
    hooks: tuple[HookHealth, ...]
    thresholds: LagThresholds
    error_threshold: int
    error_window_sec: int
    counted_at: int | None = None  # None: the counts are not known (Django's database cannot be read)
    complete: bool = True  # False while the history is still being counted for the first time
    progress: tuple[int, int] = (0, 0)  # (ids counted through, newest id) while not complete
    refusals: tuple[tuple[int, int, str], ...] = ()  # the newest failures without a call: (dateModified, id, hook)
    key_status: bool | None = None  # whether Phorge's table has key_status, as the last count found
    attempts: Digest | None = None  # the attempt log's chart and latency, as of the same refresh

    def counted(
        self,
        *,
        as_of: int | None,
        complete: bool,
        progress: tuple[int, int],
        refusals: tuple[tuple[int, int, str], ...],
        key_status: bool | None,
        attempts: Digest | None = None,
    ) -> QueueHealth:
        return dataclasses.replace(
            self,
            counted_at=as_of,
            complete=complete,
            progress=progress,
            refusals=refusals,
            key_status=key_status,
            attempts=attempts,
        )

    @property
    def counts_known(self) -> bool:
        return self.counted_at is not None

    @property
    def counted_ago(self) -> int | None:
        return None if self.counted_at is None else max(0, self.now - self.counted_at)

    @property
    def counted_share(self) -> int:
        """How much of the history the first count has read, in percent."""
        through, newest = self.progress
        return 100 if self.complete or not newest else min(99, 100 * through // newest)

    @property
    def queued(self) -> int:
        return sum(hook.queued for hook in self.hooks)

    @property
    def sent(self) -> int:
        return sum(hook.sent for hook in self.hooks)

    @property
    def failed(self) -> int:
        return sum(hook.failed for hook in self.hooks)

    @property
    def due_now(self) -> int:
        return sum(hook.due for hook in self.hooks)

    @property
    def due_held(self) -> int:
        return sum(hook.due for hook in self.hooks if hook.held)

    @property
    def oldest_due_age(self) -> int | None:
        """Seconds the oldest deliverable due request has been waiting (held hooks excluded)."""
        since = [h.oldest_due_since for h in self.hooks if not h.held and h.oldest_due_since is not None]
        return max(0, self.due_basis - min(since)) if since else None

    @property
    def due_basis(self) -> int:
        """The time the due requests are counted at: the tally's count."""
        return self.now if self.counted_at is None else self.counted_at

    @property
    def lag_state(self) -> LagState:
        age = self.oldest_due_age or 0
        if age >= self.thresholds.stalled_after:
            return "stalled"
        return "late" if age >= self.thresholds.late_after else "healthy"

    @property
    def active_hooks(self) -> int:
        return sum(1 for hook in self.hooks if hook.status != "disabled")

    @property
    def hooks_in_backoff(self) -> int:
        return sum(1 for hook in self.hooks if hook.in_backoff)

    @property
    def hooks_misconfigured(self) -> int:
        return sum(1 for hook in self.hooks if hook.misconfigured)

    @property
    def hook_phids(self) -> list[str]:
        return [hook.phid for hook in self.hooks]


class HookFacts(Protocol):
    """What the model needs of a hook as read from Phorge (selectors.HookRow)."""

    @property
    def phid(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def id(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def misconfigured(self) -> bool: ...


@dataclass
class Tally:
    """One hook's figures, folded from the grouped rows of its requests."""

    queued: int = 0
    sent: int = 0
    failed: int = 0
    due: int = 0
    oldest_due_since: int | None = None
    window_failures: int = 0
    last_success: int | None = None
    last_failed_attempt: int | None = None
    last_configuration_failure: int | None = None
    errors: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def add_pending(
        self,
        *,
        status: str,
        error: tuple[str, str] | None,
        requests: int,
        failed_attempt: int | None,
        configuration_failure: int | None,
        in_window: int,
        due: int,
        due_since: int | None,
    ) -> None:
        """One group of the hook's queued and failed rows (same status, result and error)."""
        if status == "queued":
            self.queued += requests
        elif status == "failed":
            self.failed += requests
        self.last_failed_attempt = _latest(self.last_failed_attempt, failed_attempt)
        self.last_configuration_failure = _latest(self.last_configuration_failure, configuration_failure)
        self.window_failures += in_window
        self.due += due
        if due_since is not None:
            self.oldest_due_since = _earliest(self.oldest_due_since, due_since)
        if error is not None:
            self.errors[error] += requests

    def health(self, hook: HookFacts, *, error_threshold: int, on_hold: bool) -> HookHealth:
        errors = sorted(
            (ErrorCount(kind, code, count) for (kind, code), count in self.errors.items()),
            key=lambda error: (-error.count, error.error_type, error.error_code),
        )
        return HookHealth(
            phid=hook.phid,
            id=hook.id,
            name=hook.name,
            status=hook.status,
            misconfigured=hook.misconfigured,
            queued=self.queued,
            sent=self.sent,
            failed=self.failed,
            due=self.due,
            oldest_due_since=self.oldest_due_since,
            window_failures=self.window_failures,
            in_backoff=self.window_failures >= error_threshold,
            last_success=self.last_success,
            last_failed_attempt=self.last_failed_attempt,
            last_configuration_failure=self.last_configuration_failure,
            errors=tuple(errors),
            on_hold=on_hold,
        )


def queue_health_of(
    now: int, hooks: Iterable[HookFacts], tallies: Mapping[str, Tally], held: set[str], config: DeliveryConfig
) -> QueueHealth:
    """The queue's health from each hook's tally (in the order of `hooks`) and the operator's holds."""
    return QueueHealth(
        now=now,
        hooks=tuple(
            tallies[hook.phid].health(hook, error_threshold=config.error_threshold, on_hold=hook.phid in held)
            for hook in hooks
        ),
        thresholds=lag_thresholds(config),
        error_threshold=config.error_threshold,
        error_window_sec=config.error_backoff_sec,
    )


def _latest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _earliest(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)
