"""The queue window's invariants (listed in window.py's docstring), checked from its state: what the property
tests call after every operation (QueueWindow.check_invariants)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..phorge.herald import RequestStatus


class WindowInvariantError(AssertionError):
    """The window's state broke one of its invariants (the module's docstring): a bug of ours."""


def check_invariants(
    hooks: Mapping[str, Any],
    *,
    held_count: int,
    limits: tuple[int, int],
    candidates: tuple[set[str], set[str]],
    gaps: list[list[float]],
    frontier: int,
) -> None:
    """Raise WindowInvariantError unless every invariant holds: `hooks` are the window's per-hook states,
    `limits` its (total, per hook), `candidates` the hooks with due rows and those with waiting rows."""

    def require(holds: bool, what: str) -> None:
        if not holds:
            raise WindowInvariantError(what)

    total, per_hook = limits
    ready_hooks, waiting_hooks = candidates
    held = sum(len(hook.held) for hook in hooks.values())
    require(held == held_count, f"held_count {held_count} but {held} rows held")
    require(held_count <= total, f"{held_count} rows held, more than {total}")
    for phid, hook in hooks.items():
        require(len(hook.held) <= per_hook, f"{phid} holds {len(hook.held)} rows")
        for row_id, row in hook.held.items():
            require(row.id == row_id and row.webhook_phid == phid, f"row {row_id} held under {phid}")
            require(row.status == RequestStatus.QUEUED, f"row {row_id} held though {row.status}")
        ready = set(hook.ready)
        require(hook.ready == sorted(ready), f"{phid}'s due rows out of order or repeated")
        require(ready <= hook.held.keys(), f"{phid} has due rows it does not hold")
        require(hook.out <= hook.held.keys(), f"{phid} handed out rows it does not hold")
        require(not ready & hook.out, f"{phid} has rows both due and handed out")
        waiting = {row_id for _due, row_id in hook.waiting}
        placed = ready | hook.out | waiting
        require(hook.held.keys() <= placed, f"{phid} holds rows in no place: {set(hook.held) - placed}")
        require(not hook.ready or phid in ready_hooks, f"{phid} has due rows but is not a candidate")
        require(not hook.waiting or phid in waiting_hooks, f"{phid} has waiting rows never promoted")
    for low, high, _seen in gaps:
        require(1 <= low <= high <= max(frontier, 1), f"hole {low}..{high} beyond frontier {frontier}")
