"""One hook's job (worker/job.py, its pipeline worker/pipeline.py) on the worker's parts in memory
(tests/support/twin_worker.py): real HTTP calls to the suite's receiver, no database server."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from tests.support.receiver import Receiver
from tests.support.twin_worker import FOREVER, HOOK, NOW, OTHER, worker
from tests.support.waiting import wait_for
from webhook_delivery.phorge.locks import webhook_lock_name
from webhook_delivery.worker.job import Job
from webhook_delivery.worker.parts import Pipelining
from webhook_delivery.worker.twins import MemoryStore

INLINE = Pipelining(overlapped_up_to=0)  # every job counts as one of many


@pytest.fixture
def receiver() -> Any:
    with Receiver() as running:
        yield running


def test_a_job_sends_its_hooks_rows_in_order_and_writes_each_result(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10, object_phid=f"PHID-TASK-{i:020d}") for i in range(3)]
    w = worker(store)
    result = w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert [r.object_phid for r in receiver.requests] == [f"PHID-TASK-{i:020d}" for i in range(3)]
    assert [store.rows[i].status for i in ids] == ["sent"] * 3 and result.answered is True
    assert store.claims == 3 and store.writes == 3
    assert all(r.header("X-Phabricator-Webhook-Signature") for r in receiver.requests)


def test_a_job_hands_its_hook_back_after_the_first_failure(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/down/s503"))
    ids = [store.add_request(HOOK, FOREVER, created=NOW - 10) for _ in range(4)]
    result = worker(store).runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert len(receiver.requests) == 1 and result.answered is False
    first = store.rows[ids[0]]
    assert (first.status, first.last_result, first.last_epoch) == ("queued", "fail", NOW)
    assert all(store.rows[i].last_result == "none" for i in ids[1:]), "the others wait for a later turn"


def test_a_hook_locked_elsewhere_is_left_untouched(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    row_id = store.add_request(HOOK, created=NOW - 10)
    w = worker(store)
    w.locks.taken.add(webhook_lock_name(w.config.namespace, HOOK))  # type: ignore[attr-defined]
    result = w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[row_id]]))
    assert result.lock_busy and not receiver.requests and store.claims == 0


def test_a_row_changed_since_it_was_read_is_not_sent_twice(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    row_id = store.add_request(HOOK, created=NOW - 10)
    stale = store.rows[row_id]
    store.rows[row_id] = dataclasses.replace(
        stale, status="sent", last_result="okay", last_epoch=NOW, date_modified=NOW
    )
    worker(store).runner.run(Job(HOOK, store.hooks()[HOOK], [stale]))
    assert not receiver.requests and store.writes == 0


def test_a_hold_read_during_a_job_stops_it_before_its_next_call(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10) for _ in range(5)]
    w = worker(store)
    receiver.state.on_receive = lambda _received: w.scheduler.hold(frozenset({HOOK}))
    w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert len(receiver.requests) == 1, "the call under way finished, none started after the hold"


def test_once_the_hook_answers_its_next_row_is_claimed_while_the_call_runs(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10) for _ in range(3)]
    versions = {i: store.rows[i].date_modified for i in ids}
    seen: list[tuple[bool, bool]] = []  # per call: (the next row claimed before it ends, the one after)

    def during_call(_received: Any) -> None:
        n = len(seen)
        claimed = [store.rows[i].date_modified != versions[i] for i in ids]
        if n == 1:  # the second call: the third row's claim is under way
            claimed[2] = wait_for(
                lambda: store.rows[ids[2]].date_modified != versions[ids[2]], 2, "the third row's claim", every=0.005
            )
        seen.append((claimed[n + 1] if n + 1 < 3 else False, claimed[n + 2] if n + 2 < 3 else False))

    receiver.state.on_receive = during_call
    w = worker(store)
    w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert seen == [(False, False), (True, False), (False, False)], "the first call waits; then one row ahead"
    assert [store.rows[i].status for i in ids] == ["sent"] * 3 and store.claims == 3 and store.writes == 3
    assert [r.object_phid for r in receiver.requests] == [store.rows[i].object_phid for i in ids]
    assert max(receiver.state.max_in_flight.values()) == 1, "still one call in flight for the hook"


@pytest.mark.parametrize("ending", ["the call fails", "a hold", "a stop"])
def test_a_row_claimed_ahead_of_a_call_that_ends_the_job_is_taken_back_as_it_was(
    receiver: Receiver, ending: str
) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, FOREVER, created=NOW - 10) for _ in range(3)]
    w = worker(store, delivery_timeout=0.5)
    calls: list[Any] = []

    def during_call(received: Any) -> None:
        calls.append(received)
        if len(calls) != 2:
            return
        wait_for(lambda: store.claims == 3, 2, "the third row's claim while the second call runs", every=0.005)
        if ending == "the call fails":
            time.sleep(1.0)  # past the delivery timeout
        elif ending == "a hold":
            w.scheduler.hold(frozenset({HOOK}))
        else:
            w.runner.stopping.set()

    receiver.state.on_receive = during_call
    before = store.rows[ids[2]]
    result = w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert len(receiver.requests) == 2, "no call for the row claimed ahead"
    assert store.rows[ids[2]] == before, "every column as it was: due again at once"
    assert [store.rows[i].last_result for i in ids[:2]] == ["okay", "fail" if ending == "the call fails" else "okay"]
    assert w.counters.values.get("claims_released") == 1
    assert result.settlement.fresh[-1].id == ids[2] and result.settlement.fresh[-1].properties is None
    assert ids[2] not in result.settlement.claimed


def test_a_claim_made_ahead_of_a_slow_call_is_made_again_so_its_own_call_gets_the_full_timeout(
    receiver: Receiver,
) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10) for _ in range(3)]
    receiver.state.on_receive = lambda _r: time.sleep(0.4) if len(receiver.requests) == 2 else None
    w = worker(store)
    w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert [store.rows[i].status for i in ids] == ["sent"] * 3 and len(receiver.requests) == 3
    assert store.claims == 4 and w.counters.values.get("claims_released") == 1, "taken back, then claimed again"


class CountingStore(MemoryStore):
    """The twin, counting the round trips that carry a result and the next claim together. `unknown`: the
    first such claim's outcome is not known to the job (its statement failed after the write was done),
    and it had "taken" or "not taken"."""

    def __init__(self, now: int, *, unknown: str = "") -> None:
        super().__init__(now)
        self.together = 0
        self.carried: list[int] = []  # the rows whose write carried a claim
        self.unknown = unknown

    def write_then_claim(self, written: Any, outcome: Any, claim: Any, **kwargs: Any) -> tuple[Any, Any, bool]:
        self.together += 1
        self.carried.append(written[0])
        done, claimed, known = super().write_then_claim(written, outcome, claim, **kwargs)
        if self.unknown == "taken":
            known = False
        elif self.unknown == "not taken":
            self.rows[claim.id], self.claims, known = claim, self.claims - 1, False
        self.unknown = ""
        return done, claimed, known


def test_with_many_jobs_running_a_result_and_the_next_claim_share_one_round_trip(receiver: Receiver) -> None:
    store = CountingStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10, object_phid=f"PHID-TASK-{i:020d}") for i in range(4)]
    claimed_at_call: list[bool] = []
    receiver.state.on_receive = lambda received: claimed_at_call.append(
        store.rows[ids[len(claimed_at_call)]].date_modified != NOW - 10
    )
    w = worker(store, pipelining=INLINE)
    w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert [r.object_phid for r in receiver.requests] == [f"PHID-TASK-{i:020d}" for i in range(4)]
    assert [store.rows[i].status for i in ids] == ["sent"] * 4 and claimed_at_call == [True] * 4
    assert store.together == 3 and store.writes == 4 and store.claims == 4, "the last result has no row after it"
    assert max(receiver.state.max_in_flight.values()) == 1


def test_a_job_keeps_the_pipeline_it_started_with(receiver: Receiver) -> None:
    """The strategy follows the jobs running when a job starts, and stays the job's to its end: a job started
    alone goes on Overlapped (its rows claimed ahead delivered in turn, each once, none of its writes
    carrying a claim) while a second job, started during its call, goes Inline."""
    store = CountingStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    store.add_hook(OTHER, uri=receiver.url("/other/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10) for _ in range(4)]
    others = [store.add_request(OTHER, created=NOW - 10) for _ in range(2)]
    w = worker(store, pipelining=Pipelining(overlapped_up_to=1))
    second: list[Any] = []

    def during_call(received: Any) -> None:
        if received.path == "/ok/ok" and sum(r.path == "/ok/ok" for r in receiver.requests) == 2:
            wait_for(lambda: store.claims == 3, 2, "the third row's claim while the second call runs", every=0.005)
            second.append(w.runner.run(Job(OTHER, store.hooks()[OTHER], [store.rows[i] for i in others])))

    receiver.state.on_receive = during_call
    w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert [store.rows[i].status for i in ids + others] == ["sent"] * 6 and len(receiver.requests) == 6
    assert second[0].answered is True and store.carried == [others[0]], "only the second job's writes carry claims"
    assert store.claims == 6 + w.counters.values.get("claims_released", 0) and store.writes == 6
    assert max(receiver.state.max_in_flight.values()) == 1


def test_with_many_jobs_running_a_row_claimed_with_the_last_write_is_taken_back_when_the_job_ends(
    receiver: Receiver,
) -> None:
    store = CountingStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10) for _ in range(3)]
    w = worker(store, pipelining=INLINE)
    receiver.state.on_receive = lambda _r: w.scheduler.hold(frozenset({HOOK})) if len(receiver.requests) == 2 else None
    before = store.rows[ids[2]]
    result = w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    assert len(receiver.requests) == 2 and store.carried == ids[:2], "the second write claimed the third row"
    assert store.rows[ids[2]] == before and w.counters.values.get("claims_released") == 1
    assert result.settlement.fresh[-1].id == ids[2] and ids[2] not in result.settlement.claimed


@pytest.mark.parametrize("unknown", ["taken", "not taken"])
def test_a_claim_whose_round_trip_failed_after_the_write_is_found_out_by_its_own_claim(
    receiver: Receiver, unknown: str
) -> None:
    store = CountingStore(NOW, unknown=unknown)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    ids = [store.add_request(HOOK, created=NOW - 10) for _ in range(3)]
    w = worker(store, pipelining=INLINE)
    result = w.runner.run(Job(HOOK, store.hooks()[HOOK], [store.rows[i] for i in ids]))
    sent = [i for i in ids if store.rows[i].status == "sent"]
    if unknown == "taken":  # its own claim is lost: it waits out the claim made, as after a crash
        assert sent == [ids[0], ids[2]] and w.counters.values.get("claims_lost") == 1
        assert store.rows[ids[1]].last_result == "none" and ids[1] in [r.id for r in result.settlement.fresh]
    else:  # its own claim wins: delivered in this job
        assert sent == ids and "claims_lost" not in w.counters.values
    assert len(receiver.requests) == len(sent), "nothing sent twice, nothing sent unclaimed"
