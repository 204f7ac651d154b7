"""The holes in the ids the queue window remembers (an insert not yet committed, a raised AUTO_INCREMENT): each
a range re-read for a while, and what is found in it taken out of it."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

GAP_SETTLE_SEC = 120.0
GAP_RANGES = 512
GAP_ROWS_PER_POLL = 1000


@dataclass(frozen=True)
class Gap:
    low: int
    high: int
    seen: float  # monotonic time the hole was first seen: re-read until GAP_SETTLE_SEC after


def remember(gaps: list[Gap], gap: Gap) -> None:
    gaps.append(gap)
    if len(gaps) > GAP_RANGES:
        gaps.pop(0)  # the oldest hole: the next sweep covers whatever it still hides


def unsettled(gaps: list[Gap], now: float) -> list[Gap]:
    """The holes still re-read at monotonic time `now`."""
    return [gap for gap in gaps if gap.seen >= now - GAP_SETTLE_SEC]


def without(gaps: list[Gap], found: Sequence[int]) -> list[Gap]:
    """The holes with the ids `found` (ascending) taken out: only the ids around them are still holes."""
    split: list[Gap] = []
    for gap in gaps:
        start = gap.low
        for row_id in found[bisect.bisect_left(found, gap.low) : bisect.bisect_right(found, gap.high)]:
            if row_id > start:
                split.append(Gap(start, row_id - 1, gap.seen))
            start = row_id + 1
        if start <= gap.high:
            split.append(Gap(start, gap.high, gap.seen))
    return split
