"""The queue window's invariants (listed in window.py's docstring), checked from its state: what the property
tests call after every operation (QueueWindow.check_invariants)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..phorge.herald import RequestResult, RequestRow, RequestStatus
from .window_gaps import Gap
from .window_held import HeldRows, HookShare


class WindowInvariantError(AssertionError):
    """The window's state broke one of its invariants (the module's docstring): a bug of ours."""


def _require(holds: bool, what: str) -> None:
    if not holds:
        raise WindowInvariantError(what)


def check_invariants(
    held: HeldRows,
    *,
    untried_pending: set[str],
    retry: tuple[list[tuple[int, str]], Mapping[str, int]],
    gaps: tuple[list[Gap], int],
) -> None:
    """Raise WindowInvariantError unless invariants 1 to 7 hold: `held` the window's held rows, `untried_pending`
    the hooks its refill of never-attempted rows looks at, `retry` its retry heap and Retry now orders, `gaps`
    its holes and frontier."""
    total = sum(len(hook.held) for hook in held.hooks.values())
    _require(total == held.count, f"held_count {held.count} but {total} rows held")
    _require(held.count <= held.total, f"{held.count} rows held, more than {held.total}")
    for phid, hook in held.hooks.items():
        _require(hook.phid == phid, f"{hook.phid} filed under {phid}")
        _check_places(held, hook)
        _require(hook.untried_done or phid in untried_pending, f"{phid} has never-attempted rows left unread")
    holes, frontier = gaps
    for gap in holes:
        _require(1 <= gap.low <= gap.high <= max(frontier, 1), f"hole {gap.low}..{gap.high} beyond frontier {frontier}")
    _check_retry_side(held.hooks, *retry)


def _check_places(held: HeldRows, hook: HookShare) -> None:
    """Invariants 1 to 3 for one hook."""
    phid = hook.phid
    _require(len(hook.held) <= held.per_hook, f"{phid} holds {len(hook.held)} rows")
    for row_id, row in hook.held.items():
        _require(row.id == row_id and row.webhook_phid == phid, f"row {row_id} held under {phid}")
        _require(row.status == RequestStatus.QUEUED, f"row {row_id} held though {row.status}")
    ready = set(hook.ready)
    _require(hook.ready == sorted(ready), f"{phid}'s due rows out of order or repeated")
    _require(ready <= hook.held.keys(), f"{phid} has due rows it does not hold")
    _require(hook.out <= hook.held.keys(), f"{phid} handed out rows it does not hold")
    _require(not ready & hook.out, f"{phid} has rows both due and handed out")
    waiting = {row_id for _due, row_id in hook.waiting}
    placed = ready | hook.out | waiting
    _require(hook.held.keys() <= placed, f"{phid} holds rows in no place: {set(hook.held) - placed}")
    _require(not hook.ready or phid in held.ready_hooks, f"{phid} has due rows but is not a candidate")
    _require(not hook.waiting or phid in held.waiting_hooks, f"{phid} has waiting rows never promoted")


def _check_retry_side(hooks: Mapping[str, HookShare], heap: list[tuple[int, str]], orders: Mapping[str, int]) -> None:
    """Invariants 6 and 7."""
    _require(_is_heap(heap), "the retry heap lost its order")
    entries = set(heap)
    _require({phid for _at, phid in entries} <= hooks.keys(), "the retry heap names a hook the window has not")
    for phid, hook in hooks.items():
        due = hook.retry_due_at
        _require(due is None or (due, phid) in entries, f"{phid} is to look for failed rows at {due}, never popped")
        _require(hook.retry_cursor >= (0, 0), f"{phid}'s retry cursor {hook.retry_cursor} before the start")
    _require(orders.keys() <= hooks.keys(), "a Retry now order names a hook the window has not")


def _is_heap(heap: list[tuple[int, str]]) -> bool:
    return all(heap[(i - 1) // 2] <= heap[i] for i in range(1, len(heap)))


def check_nothing_forgotten(held: HeldRows, queue: Iterable[RequestRow], *, gaps: tuple[list[Gap], int]) -> None:
    """Invariant 8, given every row of the queue as its source holds it."""
    holes, frontier = gaps
    for row in queue:
        hook = held.hooks.get(row.webhook_phid)
        if hook is None or row.status != RequestStatus.QUEUED or row.id > frontier or row.id in hook.held:
            continue
        if any(gap.low <= row.id <= gap.high for gap in holes):
            continue
        if row.last_result == RequestResult.NONE and row.last_epoch == 0:
            _require(
                not (hook.untried_done or row.id <= hook.untried_after),
                f"never-attempted row {row.id} of {hook.phid} passed by its cursor but not held",
            )
        elif row.last_result == RequestResult.FAIL:
            _require(
                (row.last_epoch, row.id) > hook.retry_cursor,
                f"failed row {row.id} of {hook.phid} passed by its retry cursor {hook.retry_cursor} but not held",
            )
