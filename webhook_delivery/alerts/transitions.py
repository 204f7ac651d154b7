"""The alert state machine, pure: what one pass does to one condition, from what Django's database remembers
of it (`Known`), what the pass saw of it (`Seen`), the database clock and how long it must hold (`hold`:
a start is told once the condition has held that long, an end once it has been clear as long).

The watcher applies each step with one guarded statement in Django's database (watcher.py `_apply`): a
conditional UPDATE on the state it read, or an INSERT on the condition's unique key, so that however many
watchers run, one wins each step and only the winner tells it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Seen(enum.Enum):
    HOLDS = "holds"  # observed in this pass
    SUSTAINS = "sustains"  # observed, but only keeps an active condition going: it never starts one
    CLEAR = "clear"  # its kind was evaluated in this pass, and it was not observed
    UNKNOWN = "unknown"  # its kind was not evaluated (Phorge's database did not answer): nothing changes


@dataclass(frozen=True)
class Known:
    """A condition's row as read at the start of the pass."""

    active: bool
    episode: int
    pending_since: int | None = None  # held since then, not told yet (a hold time)
    clear_since: int | None = None  # active, but not observed since then (a hold time)


class Step(enum.Enum):
    NOTHING = "nothing"
    REFRESH = "refresh"  # active and observed: its facts brought up to date, a clearing forgotten
    REMEMBER = "remember"  # first seen, with a hold time: a new row, pending from now
    PEND = "pend"  # a known, inactive row seen again: pending from now
    OPEN = "open"  # first seen, nothing to wait for: a new row, active, episode 1; told
    REOPEN = "reopen"  # inactive: active again, its next episode; told
    FORGET = "forget"  # pending, and no longer observed before it was told: its count starts again
    CLEARING = "clearing"  # active, not observed, with a hold time: clear from now
    RECOVER = "recover"  # active, and clear long enough: inactive; told


ENTERED = frozenset({Step.OPEN, Step.REOPEN})


def decide(known: Known | None, seen: Seen, now: int, hold: float) -> Step:
    """The one step this pass takes for a condition (`known` None: Django's database has no row for it)."""
    if seen is Seen.UNKNOWN:
        return Step.NOTHING
    if seen is not Seen.CLEAR:
        if known is not None and known.active:
            return Step.REFRESH
        if seen is Seen.SUSTAINS:
            return Step.NOTHING
        if hold > 0:
            pending = None if known is None else known.pending_since
            if pending is None:
                return Step.REMEMBER if known is None else Step.PEND
            if now - pending < hold:
                return Step.NOTHING
        return Step.OPEN if known is None else Step.REOPEN
    if known is None:
        return Step.NOTHING
    if not known.active:
        return Step.FORGET if known.pending_since is not None else Step.NOTHING
    if hold > 0:
        if known.clear_since is None:
            return Step.CLEARING
        if now - known.clear_since < hold:
            return Step.NOTHING
    return Step.RECOVER
