"""alerts/transitions.py: the alert state machine as a pure function, step by step and over any sequence of
passes (the watcher's guarded statements, watcher._apply, are the db lane's: tests/db/test_alerts.py)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook_delivery.alerts.transitions import ENTERED, Known, Seen, Step, decide

NOW = 1_764_620_000
ACTIVE = Known(active=True, episode=3)
ENDED = Known(active=False, episode=3)


@pytest.mark.parametrize(
    ("known", "seen", "hold", "step"),
    [
        (None, Seen.HOLDS, 0, Step.OPEN),
        (None, Seen.HOLDS, 60, Step.REMEMBER),
        (None, Seen.SUSTAINS, 0, Step.NOTHING),
        (None, Seen.CLEAR, 0, Step.NOTHING),
        (None, Seen.UNKNOWN, 0, Step.NOTHING),
        (ENDED, Seen.HOLDS, 0, Step.REOPEN),
        (ENDED, Seen.HOLDS, 60, Step.PEND),
        (dataclasses.replace(ENDED, pending_since=NOW - 59), Seen.HOLDS, 60, Step.NOTHING),
        (dataclasses.replace(ENDED, pending_since=NOW - 60), Seen.HOLDS, 60, Step.REOPEN),
        (dataclasses.replace(ENDED, pending_since=NOW - 30), Seen.CLEAR, 60, Step.FORGET),
        (dataclasses.replace(ENDED, pending_since=NOW - 30), Seen.UNKNOWN, 60, Step.NOTHING),
        (ENDED, Seen.SUSTAINS, 0, Step.NOTHING),
        (ENDED, Seen.CLEAR, 0, Step.NOTHING),
        (ACTIVE, Seen.HOLDS, 0, Step.REFRESH),
        (ACTIVE, Seen.SUSTAINS, 0, Step.REFRESH),
        (dataclasses.replace(ACTIVE, clear_since=NOW - 10), Seen.HOLDS, 60, Step.REFRESH),
        (ACTIVE, Seen.CLEAR, 0, Step.RECOVER),
        (ACTIVE, Seen.CLEAR, 60, Step.CLEARING),
        (dataclasses.replace(ACTIVE, clear_since=NOW - 59), Seen.CLEAR, 60, Step.NOTHING),
        (dataclasses.replace(ACTIVE, clear_since=NOW - 60), Seen.CLEAR, 60, Step.RECOVER),
        (ACTIVE, Seen.UNKNOWN, 0, Step.NOTHING),
    ],
)
def test_each_state_and_observation_gives_its_step(known: Known | None, seen: Seen, hold: float, step: Step) -> None:
    assert decide(known, seen, NOW, hold) is step


def _applied(known: Known | None, step: Step, now: int) -> Known | None:
    """What the watcher's guarded statement for `step` leaves of the row, when it wins."""
    if step is Step.REMEMBER:
        return Known(active=False, episode=0, pending_since=now)
    if step is Step.OPEN:
        return Known(active=True, episode=1)
    assert known is not None or step is Step.NOTHING
    if known is None:
        return None
    changes: dict[Step, Known] = {
        Step.NOTHING: known,
        Step.REFRESH: dataclasses.replace(known, clear_since=None),
        Step.PEND: dataclasses.replace(known, pending_since=now),
        Step.REOPEN: Known(active=True, episode=known.episode + 1),
        Step.FORGET: dataclasses.replace(known, pending_since=None),
        Step.CLEARING: dataclasses.replace(known, clear_since=now),
        Step.RECOVER: Known(active=False, episode=known.episode),
    }
    return changes[step]


PASSES = st.lists(
    st.tuples(st.sampled_from(list(Seen)), st.integers(min_value=1, max_value=90)), min_size=1, max_size=40
)


@given(passes=PASSES, hold=st.sampled_from([0, 30, 60]))
def test_over_any_passes_starts_and_ends_alternate_and_each_waits_its_hold(
    passes: list[tuple[Seen, int]], hold: int
) -> None:
    known: Known | None = None
    now = NOW
    told: list[str] = []
    holding_since: int | None = None  # since when it has been observed in every pass that saw its kind
    clear_since: int | None = None
    for seen, gap in passes:
        now += gap
        step = decide(known, seen, now, hold)
        if seen in (Seen.HOLDS, Seen.SUSTAINS):
            holding_since = now if holding_since is None else holding_since
            clear_since = None
        elif seen is Seen.CLEAR:
            clear_since = now if clear_since is None else clear_since
            holding_since = None
        if step in ENTERED:
            assert seen is Seen.HOLDS, "only a pass that saw it starts it"
            assert known is None or not known.active
            assert holding_since is not None and now - holding_since >= hold, "held its hold time first"
            told.append("entered")
        elif step is Step.RECOVER:
            assert seen is Seen.CLEAR and known is not None and known.active
            assert clear_since is not None and now - clear_since >= hold, "clear as long first"
            told.append("recovered")
        elif seen is Seen.UNKNOWN:
            assert step is Step.NOTHING, "a pass that could not look changes nothing"
        known = _applied(known, step, now)
    assert told == ["entered", "recovered"] * (len(told) // 2) + ["entered"] * (len(told) % 2)
    episodes = told.count("entered")
    assert known is None or known.episode == episodes or (known.episode == 0 and episodes == 0)
