"""The queue window on an in-memory source: bounded, refilled as it drains, nothing skipped or forgotten."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.support.clock import FixedClock
from tests.support.memory_source import MemorySource
from webhook_delivery.phorge.herald import RequestRow
from webhook_delivery.worker.window import GAP_SETTLE_SEC, SWEEP_INTERVAL_SEC, QueueWindow, Settlement

LEASE, BACKOFF = 60, 300


def window(source: MemorySource, **options: int) -> tuple[QueueWindow, FixedClock]:
    monotonic = FixedClock()
    made = QueueWindow(
        source,
        lease=LEASE,
        retry_backoff=BACKOFF,
        clock=lambda: float(source.now),
        monotonic=monotonic,
        **options,
    )
    return made, monotonic


def drain(source: MemorySource, win: QueueWindow, *, per_job: int = 32, max_polls: int = 10_000) -> list[int]:
    """Deliver everything the window proposes, as the worker would; returns ids in delivery order."""
    delivered: list[int] = []
    for _ in range(max_polls):
        more = win.poll()
        win.check_invariants()
        candidates = win.candidates()
        if not candidates and not more:
            return delivered
        for _first, hook in candidates:
            rows = win.take(hook, per_job)
            for row in rows:
                source.send(row.id)
                delivered.append(row.id)
            win.settle(Settlement(hook, rows, done=[row.id for row in rows]))
    raise AssertionError("the window never ran dry")


def test_a_huge_backlog_is_held_within_the_caps_and_drained_oldest_first_without_a_gap() -> None:
    source = MemorySource()
    hooks = [f"PHID-HWBH-{i:020d}" for i in range(10)]
    for i in range(20_000):
        source.add(hooks[i % 10])
    win, _ = window(source, per_hook=64, total=300)
    win.poll()
    assert win.held_count <= 300
    assert win.candidates(), "delivery starts before the backlog is read to the end"
    assert source.touched["untried"] < 1000
    delivered = drain(source, win)
    assert sorted(delivered) == list(range(1, 20_001))  # each exactly once
    by_hook: dict[str, list[int]] = defaultdict(list)
    for row_id in delivered:
        by_hook[source.rows[row_id].webhook_phid].append(row_id)
    assert all(ids == sorted(ids) for ids in by_hook.values())  # oldest first within each hook


def test_rows_waiting_out_their_backoff_are_not_held_and_due_rows_come_first() -> None:
    source = MemorySource()
    hook = "PHID-HWBH-backoffbackoffbackof"
    waiting = [source.add(hook, result="fail", epoch=source.now - 10) for _ in range(5000)]
    fresh = [source.add(hook) for _ in range(10)]
    win, _ = window(source)
    win.poll()
    assert win.held_count == 10  # the 5000 in backoff cost nothing but one due time
    rows = win.take(hook, 100)
    assert [row.id for row in rows] == fresh
    for row_id in fresh:
        source.send(row_id)
    win.settle(Settlement(hook, rows, done=fresh))
    source.now += BACKOFF  # now they all come due
    assert drain(source, win) == waiting


def test_retry_now_makes_failures_up_to_its_moment_due_at_once_and_no_later_one() -> None:
    """Held rows in their backoff, and failed rows not yet read (more than a hook holds), come due at once; a
    failure after the moment waits its backoff, as do other hooks'; the order lifted, the rule is Phorge's."""
    source = MemorySource()
    hook, other = "PHID-HWBH-retrynowretrynowretr", "PHID-HWBH-otherotherotherother"
    at = source.now
    covered = [source.add(hook, result="fail", epoch=at - 100 + n % 50, created=at - 200) for n in range(100)]
    later = source.add(hook, result="fail", epoch=at - 10, created=at - 200)
    elsewhere = source.add(other, result="fail", epoch=at - 100, created=at - 200)
    win, _ = window(source)
    win.poll()
    assert win.candidates() == [] and win.held_count == 0, "all in their backoff"
    win.retry_now({hook: source.now - 51})
    assert sorted(drain(source, win)) == covered, "each once, without the clock moving"
    assert source.rows[later].status == "queued" and source.rows[elsewhere].status == "queued"
    win.retry_now({})
    source.now += BACKOFF - 10
    assert sorted(drain(source, win)) == [later, elsewhere]


def test_a_row_failed_again_in_the_second_a_retry_now_read_it_is_read_again_after_its_backoff() -> None:
    """The retry cursor stops on a row read in the second it failed (a Retry now up to that second); failed
    again at once, it is behind the cursor, which goes back for it."""
    source = MemorySource()
    hook = "PHID-HWBH-samesecondsamesecond"
    row_id = source.add(hook)
    win, _ = window(source, per_hook=1)
    win.poll()
    for _ in range(2):
        rows = win.take(hook, 1)
        source.fail(row_id)
        win.settle(Settlement(hook, rows, retried=[(row_id, source.now)]))
        win.retry_now({hook: source.now})
        win.poll()
        win.check_invariants(source.rows.values())
    win.retry_now({})
    source.now += BACKOFF
    assert drain(source, win) == [row_id]


def test_an_old_queued_row_below_the_start_up_frontier_is_found() -> None:
    source = MemorySource()
    hook = "PHID-HWBH-oldoldoldoldoldoldold"
    stuck = source.add(hook, created=source.now - 6 * 86400)
    retry = source.add(hook, result="fail", epoch=source.now - 4000, created=source.now - 5 * 86400)
    for _ in range(5000):
        source.add(hook, status="sent", result="okay", epoch=source.now)
    win, _ = window(source)
    win.poll()
    assert {row.id for row in win.take(hook, 10)} == {stuck, retry}
    assert source.touched["retries"] == 1 and source.touched["untried"] == 1  # the sent history untouched


def test_idle_polls_read_no_retained_history() -> None:
    source = MemorySource()
    hooks = [f"PHID-HWBH-{i:020d}" for i in range(16)]
    for i in range(50_000):
        source.add(hooks[i % 16], status="sent", result="okay", epoch=source.now - 100)
    for i in range(200):  # retry=never failures: in the same index range as retries
        source.add(hooks[i % 16], status="failed", result="fail", epoch=source.now - 100)
    win, _ = window(source)
    while win.poll():
        pass
    before = source.touched.copy()
    for _ in range(600):
        win.poll()
        source.now += 1
    assert win.held_count == 0
    # Nothing of the sent history, and each failed row stepped over once, when its retry time passed.
    assert source.touched - before == {"retries": 200}


def test_a_jump_in_ids_costs_one_range_and_a_late_commit_inside_it_is_found() -> None:
    source = MemorySource()
    hook = "PHID-HWBH-jumpjumpjumpjumpjump"
    for _ in range(3):
        source.add(hook)
    win, clock = window(source)
    drain(source, win)
    source.add(hook, id=50_000_000)  # AUTO_INCREMENT raised, or an explicit high id
    win.poll()
    assert len(win.gaps) <= 2 and win.frontier == 50_000_000
    late = source.add(hook, id=20_000_000)  # an insert that commits after a higher id was seen
    assert late in drain(source, win)
    clock.advance(GAP_SETTLE_SEC + 1)
    win.poll()
    assert win.gaps == []


def test_a_queued_row_whose_hook_row_is_gone_is_found_by_the_listing() -> None:
    source = MemorySource()
    orphan = source.add("PHID-HWBH-goneagonegonegonegon", listed=0)
    source.add("PHID-HWBH-heretherehereherehe")
    win, _ = window(source)
    assert orphan in drain(source, win)


def test_a_retried_row_comes_back_after_the_backoff_and_a_claimed_one_after_the_lease() -> None:
    source = MemorySource()
    hook = "PHID-HWBH-retryretryretryretryr"
    first, second = source.add(hook), source.add(hook)
    win, _ = window(source)
    win.poll()
    rows = win.take(hook, 32)
    source.fail(first)
    win.settle(Settlement(hook, rows, retried=[(first, source.now)], claimed=[second]))
    win.poll()
    assert win.candidates() == []
    source.now += LEASE
    win.poll()
    assert [row.id for row in win.take(hook, 32)] == [second]
    win.settle(Settlement(hook, [source.rows[second]], done=[second]))
    source.send(second)
    source.now += BACKOFF - LEASE
    win.poll()
    assert [row.id for row in win.take(hook, 32)] == [first]


def test_a_row_claimed_elsewhere_waits_for_its_lease() -> None:
    source = MemorySource()
    hook = "PHID-HWBH-claimclaimclaimclaimc"
    row_id = source.add(hook)
    source.update(row_id, date_modified=source.now + 1)  # another process claimed it a second later
    win, _ = window(source)
    win.poll()
    assert win.candidates() == [] and win.held_count == 1
    source.now += LEASE + 1
    win.poll()
    assert [row.id for row in win.take(hook, 1)] == [row_id]


class WindowMachine(RuleBasedStateMachine):
    """The window driven as the worker drives it, with the queue changing under it as Phorge and other
    workers change it: its invariants hold after every step, and once every job is back and enough time
    has passed, every queued row is proposed and delivered exactly once."""

    HOOKS = [f"PHID-HWBH-{i:020d}" for i in range(4)]

    def __init__(self) -> None:
        super().__init__()
        self.source = MemorySource()
        # One hook a query and two queries a poll: refills often go beyond one poll's budget.
        self.win, self.monotonic = window(self.source, per_hook=4, total=10, hooks_per_query=1, queries_per_poll=2)
        self.out: list[tuple[str, list[RequestRow]]] = []
        self.orders: dict[str, int] = {}

    @rule(
        hook=st.sampled_from(HOOKS), count=st.integers(1, 6), kind=st.sampled_from(["untried", "failed", "fresh-fail"])
    )
    def phorge_queues(self, hook: str, count: int, kind: str) -> None:
        for _ in range(count):
            if kind == "untried":
                self.source.add(hook)
            else:  # failed long ago (due now), or a moment ago (in its retry backoff)
                epoch = self.source.now - (BACKOFF * 2 if kind == "failed" else 5)
                self.source.add(hook, result="fail", epoch=epoch, created=epoch - 10)

    @rule(seconds=st.sampled_from([0, 1, 30, LEASE + 1, BACKOFF + 1]))
    def time_passes(self, seconds: int) -> None:
        self.source.now += seconds
        self.monotonic.advance(seconds)

    @rule()
    def poll(self) -> None:
        self.win.poll()

    @rule(hook=st.sampled_from(HOOKS), back=st.sampled_from([0, 3, BACKOFF]))
    def operator_orders_retry_now(self, hook: str, back: int) -> None:
        """Failures up to `back` seconds ago wait no backoff (0: up to now, as the order's moment may be)."""
        self.orders[hook] = max(self.orders.get(hook, 0), self.source.now - back)
        self.win.retry_now(self.orders)

    @rule(hook=st.sampled_from(HOOKS))
    def retry_now_lifted(self, hook: str) -> None:
        self.orders.pop(hook, None)
        self.win.retry_now(self.orders)

    @rule(data=st.data(), limit=st.integers(1, 5))
    def take(self, data: st.DataObject, limit: int) -> None:
        busy = {hook for hook, _rows in self.out}
        candidates = self.win.candidates(lambda hook: hook not in busy)
        if candidates:
            hook = data.draw(st.sampled_from([hook for _first, hook in candidates]))
            self.out.append((hook, self.win.take(hook, limit)))

    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        if not self.out:
            return
        hook, rows = self.out.pop(data.draw(st.integers(0, len(self.out) - 1)))
        settlement = Settlement(hook, rows)
        for row in rows:
            fate = data.draw(st.sampled_from(["sent", "retried", "claimed", "deferred", "newer", "untouched"]))
            if fate == "sent":
                self.source.send(row.id)
                settlement.done.append(row.id)
            elif fate == "retried":
                self.source.fail(row.id)
                settlement.retried.append((row.id, self.source.now))
            elif fate == "claimed":
                self.source.update(row.id, date_modified=self.source.now + 1)
                settlement.claimed.append(row.id)
            elif fate == "deferred":
                settlement.deferred.append((row.id, self.source.now + 3))
            elif fate == "newer":
                self.source.update(row.id, date_modified=self.source.now + 1)
                settlement.fresh.append(self.source.rows[row.id])
        self.win.settle(settlement)

    @rule(data=st.data())
    def another_worker_delivers(self, data: st.DataObject) -> None:
        queued = sorted(i for i, row in self.source.rows.items() if row.status == "queued")
        if queued:
            self.source.send(data.draw(st.sampled_from(queued)))

    @invariant()
    def invariants_hold(self) -> None:
        self.win.check_invariants(self.source.rows.values())

    def _queued_left(self) -> bool:
        return any(row.status == "queued" for row in self.source.rows.values())

    def teardown(self) -> None:
        for hook, rows in self.out:
            self.win.settle(Settlement(hook, rows))
        self.out = []
        self.win.check_invariants()
        self.source.now += BACKOFF + LEASE + 1
        self.monotonic.advance(SWEEP_INTERVAL_SEC + 1)
        queued = {i for i, row in self.source.rows.items() if row.status == "queued"}
        delivered: list[int] = []
        for _ in range(1000):  # a second a turn; as jobs do, a row no longer queued when re-read is given back
            self.source.now += 1
            self.monotonic.advance(1)
            more = self.win.poll()
            self.win.check_invariants(self.source.rows.values())
            candidates = self.win.candidates()
            if not candidates and not more and not self._queued_left():
                break
            for _first, hook in candidates:
                rows = self.win.take(hook, 4)
                for row in rows:
                    if self.source.rows[row.id].status == "queued":
                        self.source.send(row.id)
                        delivered.append(row.id)
                self.win.settle(Settlement(hook, rows, done=[row.id for row in rows]))
        assert sorted(delivered) == sorted(queued)


TestWindowMachine = WindowMachine.TestCase
TestWindowMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
