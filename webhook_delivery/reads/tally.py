"""The tally: the counts of Phorge's retained requests kept between refreshes, so that no page, JSON answer or
scrape recounts the history (tally_refresh.py keeps it up to date, records/tally.py stores it in Django's
database). Pure values: nothing here connects.

The requests are counted by chunks of CHUNK consecutive ids. A chunk holds the counts of its *settled*
requests (not `queued`): a settled request changes only when it is put back in the queue (a requeue) or
deleted by Phorge's garbage collector, so a chunk is counted again only then (and now and then to heal).
Queued requests are in no chunk: their ids are kept as runs (sorted, disjoint `(low, high)` ranges) and read
again at every refresh, which finds the ones settled since.

What a request counts for follows the figures the pages always showed (reads/health.py): a request whose
last result is `okay` is sent; one with `none` or `fail` is queued or failed by its status, and its stored
errorType/errorCode is counted when it failed or its last attempt did; a failed request without a call
(`none`) dates its failure in dateModified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CHUNK = 10_000

Run = tuple[int, int]
ErrorKey = tuple[str, str]


# -- runs of ids ------------------------------------------------------------------------------------------


def normalized(runs: Iterable[Run]) -> list[Run]:
    """Sorted, merged where they touch or overlap."""
    merged: list[Run] = []
    for low, high in sorted(runs):
        if high < low:
            continue
        if merged and low <= merged[-1][1] + 1:
            if high > merged[-1][1]:
                merged[-1] = (merged[-1][0], high)
        else:
            merged.append((low, high))
    return merged


def union(a: Iterable[Run], b: Iterable[Run]) -> list[Run]:
    return normalized([*a, *b])


def minus(a: Iterable[Run], b: Iterable[Run]) -> list[Run]:
    """The ids of `a` that are not in `b` (both normalized)."""
    taken = list(b)
    left: list[Run] = []
    index = 0
    for low, high in a:
        while index < len(taken) and taken[index][1] < low:
            index += 1
        cursor, scan = low, index
        while scan < len(taken) and taken[scan][0] <= high:
            if taken[scan][0] > cursor:
                left.append((cursor, taken[scan][0] - 1))
            cursor = max(cursor, taken[scan][1] + 1)
            scan += 1
        if cursor <= high:
            left.append((cursor, high))
    return left


def clip(runs: Iterable[Run], low: int, high: int) -> list[Run]:
    """The part of `runs` within low .. high."""
    return [(max(a, low), min(b, high)) for a, b in runs if b >= low and a <= high]


def size(runs: Iterable[Run]) -> int:
    return sum(high - low + 1 for low, high in runs)


def chunk_range(number: int) -> Run:
    return number * CHUNK, number * CHUNK + CHUNK - 1


def chunks_of(runs: Iterable[Run]) -> set[int]:
    """The chunks these ids fall in."""
    found: set[int] = set()
    for low, high in runs:
        found.update(range(low // CHUNK, high // CHUNK + 1))
    return found


# -- what requests count for --------------------------------------------------------------------------------


def _add_errors(into: dict[ErrorKey, int], errors: Mapping[ErrorKey, int], sign: int) -> None:
    for key, count in errors.items():
        total = into.get(key, 0) + sign * count
        if total:
            into[key] = total
        else:
            into.pop(key, None)


def _errors_json(errors: Mapping[ErrorKey, int]) -> list[list[Any]]:
    return [[kind, code, count] for (kind, code), count in sorted(errors.items())]


def _errors_from(value: Any) -> dict[ErrorKey, int]:
    return {(str(kind), str(code)): int(count) for kind, code, count in value or []}


@dataclass
class Settled:
    """One hook's settled requests: of a chunk, or of every chunk."""

    sent: int = 0
    failed: int = 0
    refused_at: int = 0  # the newest dateModified of a failed request without a call; 0: none
    errors: dict[ErrorKey, int] = field(default_factory=dict)

    def add(self, other: Settled, sign: int = 1) -> None:
        """Add (or, with sign -1, take away) the counts; the newest refusal is kept by the caller."""
        self.sent += sign * other.sent
        self.failed += sign * other.failed
        if sign > 0:
            self.refused_at = max(self.refused_at, other.refused_at)
        _add_errors(self.errors, other.errors, sign)

    @property
    def empty(self) -> bool:
        return not (self.sent or self.failed or self.refused_at or self.errors)

    def to_json(self) -> list[Any]:
        return [self.sent, self.failed, self.refused_at, _errors_json(self.errors)]

    @classmethod
    def from_json(cls, value: Any) -> Settled:
        sent, failed, refused_at, errors = value
        return cls(int(sent), int(failed), int(refused_at), _errors_from(errors))


@dataclass(frozen=True)
class Group:
    """One grouped row the database gives of some requests: same chunk, hook, status, result and error."""

    chunk: int
    hook: str
    status: str
    result: str
    error: ErrorKey | None
    requests: int
    refused_at: int  # the newest dateModified of the group's failed requests without a call; 0: none
    oldest: int  # the smallest dateCreated
    due: int = 0  # queued requests due at the time of the reading
    due_since: int | None = None

    @property
    def queued(self) -> bool:
        return self.status == "queued"


def settled_of(group: Group) -> Settled:
    """What a group of settled requests adds to its hook's counts."""
    counts = Settled()
    if group.result == "okay":
        counts.sent = group.requests
    elif group.result in ("none", "fail"):
        if group.status == "failed":
            counts.failed = group.requests
        if group.error is not None:
            counts.errors[group.error] = group.requests
        counts.refused_at = group.refused_at
    return counts


@dataclass
class Waiting:
    """One hook's queued requests, as read at the refresh."""

    queued: int = 0
    sent: int = 0  # queued with an `okay` result: counted as sent, as the pages always did
    due: int = 0
    due_since: int | None = None
    errors: dict[ErrorKey, int] = field(default_factory=dict)

    def add(self, group: Group) -> None:
        if group.result == "okay":
            self.sent += group.requests
        elif group.result in ("none", "fail"):
            self.queued += group.requests
            if group.error is not None:
                _add_errors(self.errors, {group.error: group.requests}, 1)
        self.due += group.due
        if group.due_since is not None:
            self.due_since = group.due_since if self.due_since is None else min(self.due_since, group.due_since)

    def to_json(self) -> list[Any]:
        return [self.queued, self.sent, self.due, self.due_since, _errors_json(self.errors)]

    @classmethod
    def from_json(cls, value: Any) -> Waiting:
        queued, sent, due, due_since, errors = value
        return cls(
            int(queued), int(sent), int(due), None if due_since is None else int(due_since), _errors_from(errors)
        )


@dataclass
class Chunk:
    """The settled requests of ids number * CHUNK .. number * CHUNK + CHUNK - 1, by hook."""

    number: int
    hooks: dict[str, Settled] = field(default_factory=dict)

    def add(self, group: Group) -> None:
        counts = settled_of(group)
        if not counts.empty:
            self.hooks.setdefault(group.hook, Settled()).add(counts)

    def to_json(self) -> dict[str, Any]:
        return {hook: counts.to_json() for hook, counts in sorted(self.hooks.items()) if not counts.empty}

    @classmethod
    def from_json(cls, number: int, value: Mapping[str, Any]) -> Chunk:
        return cls(number, {hook: Settled.from_json(counts) for hook, counts in value.items()})


def add_chunk(totals: dict[str, Settled], chunk: Chunk, sign: int) -> set[str]:
    """Add (or take away) a chunk's counts to the totals; the hooks whose newest refusal may have been taken
    away with it (their newest refusal must be found again among the chunks)."""
    unsure: set[str] = set()
    for hook, counts in chunk.hooks.items():
        total = totals.setdefault(hook, Settled())
        if sign < 0 and counts.refused_at and counts.refused_at >= total.refused_at:
            unsure.add(hook)
        total.add(counts, sign)
        if total.empty:
            del totals[hook]
    return unsure


def totals_json(totals: Mapping[str, Settled]) -> dict[str, Any]:
    return {hook: counts.to_json() for hook, counts in sorted(totals.items())}


def totals_from(value: Mapping[str, Any] | None) -> dict[str, Settled]:
    return {hook: Settled.from_json(counts) for hook, counts in (value or {}).items()}


def waiting_from(value: Mapping[str, Any] | None) -> dict[str, Waiting]:
    return {hook: Waiting.from_json(counts) for hook, counts in (value or {}).items()}
