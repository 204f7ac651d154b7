"""A worker's state (webhook_delivery/state.py `WorkerState`): written once (`as_json`), read once (`from_json`),
tolerant of what an older release wrote. Release 0.2.0's reader beside this writer: tests/process/test_upgrade.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook_delivery.state import PhpDelivery, TaskWhileDelegated, WorkerState

FULL = WorkerState(
    max_concurrent=16,
    in_flight=3,
    lanes={"fast": 2, "slow": 1},
    tracked_queued=40,
    counts={"deliveries.sent": 7, "degraded.database": 2},
    database_down_for_sec=12.5,
    hooks_in_backoff={"PHID-HWBH-a": 1_700_000_300},
    hooks_misconfigured=("PHID-HWBH-b",),
    hooks_held=("PHID-HWBH-c", "PHID-HWBH-d"),
    hooks_lock_busy=("PHID-HWBH-e",),
    stopping=True,
    php_worker=PhpDelivery("active", 2, 1, 0, None, "2 tasks"),
    delivery_paused="phabricator.silent is unknown",
    php_task_while_delegated=TaskWhileDelegated("PHID-HWBR-x", 1_700_000_000, 1_700_000_010),
    phorge_now=1_700_000_020,
    stopped="error",
)


def test_what_is_written_reads_back_the_same_through_json() -> None:
    assert WorkerState.from_json(json.loads(json.dumps(FULL.as_json()))) == FULL
    assert WorkerState.from_json(WorkerState().as_json()) == WorkerState()


def test_the_json_keeps_the_keys_and_types_release_0_2_0_reads() -> None:
    """0.2.0's reader takes ints with int(), counts by len() of a list or dict, `stopped` only when present."""
    data = FULL.as_json()
    assert data["version"] == 1
    assert isinstance(data["max_concurrent"], int) and isinstance(data["in_flight"], int)
    assert data["hooks_in_backoff"] == {"PHID-HWBH-a": 1_700_000_300}
    assert data["hooks_held"] == ["PHID-HWBH-c", "PHID-HWBH-d"] and data["hooks_misconfigured"] == ["PHID-HWBH-b"]
    assert data["php_worker"]["state"] == "active" and data["php_task_while_delegated"]["request"] == "PHID-HWBR-x"
    assert data["stopped"] == "error" and "stopped" not in WorkerState().as_json()


def test_an_older_beat_with_fewer_keys_reads_as_unsaid() -> None:
    old = WorkerState.from_json({"max_concurrent": 4, "in_flight": 1, "counts": {"degraded.database": 1}})
    assert (old.max_concurrent, old.in_flight, old.degraded) == (4, 1, {"database": 1})
    assert old.phorge_now is None and old.stopped is None and old.delivery_paused is None
    assert old.php_worker.state == "unknown" and old.php_task_while_delegated is None
    assert WorkerState.from_json({}) == WorkerState() == WorkerState.from_json(None)


@pytest.mark.parametrize(
    ("data", "read"),
    [
        ({"max_concurrent": "16"}, WorkerState()),
        ({"in_flight": True}, WorkerState()),
        ({"database_down_for_sec": 3}, WorkerState(database_down_for_sec=3.0)),
        ({"database_down_for_sec": "3"}, WorkerState()),
        ({"counts": {"a": 1, "b": "2", "c": None}}, WorkerState(counts={"a": 1})),
        ({"hooks_in_backoff": ["PHID-HWBH-a", 7]}, WorkerState(hooks_in_backoff={"PHID-HWBH-a": 0})),
        ({"hooks_held": ["PHID-HWBH-a", 1, None]}, WorkerState(hooks_held=("PHID-HWBH-a",))),
        ({"hooks_held": "PHID-HWBH-a"}, WorkerState()),
        ({"stopped": "crashed"}, WorkerState()),
        ({"stopped": "clean"}, WorkerState(stopped="clean")),
        ({"phorge_now": 1.5}, WorkerState()),
        ({"delivery_paused": 1}, WorkerState()),
        ({"php_task_while_delegated": {"request": "PHID-HWBR-x"}}, WorkerState()),
    ],
)
def test_a_value_not_of_its_type_reads_as_unsaid(data: dict[str, Any], read: WorkerState) -> None:
    assert WorkerState.from_json(data) == read


def test_the_last_beat_says_how_the_process_stopped() -> None:
    assert WorkerState().retired(clean=True).stopped == "clean"
    assert FULL.retired(clean=True) == WorkerState.from_json({**FULL.as_json(), "stopped": "clean"})
