"""The worker (webhook_delivery/worker/) against real MariaDB and a real receiver: the claim protocol and the
delivery loop, bad rows (nothing lost, nothing sent twice, no traceback), every call under the hook's lock."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import OperationalError, connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin, with_event
from tests.support.receiver import Receiver
from webhook_delivery.phorge.herald import Dialect, RequestRow, backoff_until, counts_toward_breaker, is_due, next_due
from webhook_delivery.phorge.locks import webhook_lock_name
from webhook_delivery.worker.dispatcher import Dispatcher
from webhook_delivery.worker.job import Job
from webhook_delivery.worker.loop import Worker, build_worker
from webhook_delivery.worker.parts import build_parts
from webhook_delivery.worker.store import Store

pytestmark = PHORGE_DB


def run_until(config: Any, done: Callable[[], bool], *, timeout: float = 20.0, **options: Any) -> Worker:
    """Run a long-running worker in a thread until `done()` holds, then stop it like SIGTERM would."""
    worker = build_worker(config, **options)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "worker did not get there in time"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    return worker


def test_concurrent_claims_of_one_snapshot_have_exactly_one_winner(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x/ok")
    phids = [phorge.request(hook) for _ in range(15)]
    for phid in phids:
        snapshot = phorge.snapshot(phid)
        barrier = threading.Barrier(4)
        wins: list[int | None] = []

        def claim(row: RequestRow = snapshot, gate: threading.Barrier = barrier, wins: list[int | None] = wins) -> None:
            store = Store()
            gate.wait()
            wins.append(store.claim(row, lease=60, retry_backoff=300))
            connections["phorge"].close()

        threads = [threading.Thread(target=claim) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len([w for w in wins if w is not None]) == 1, wins


def test_same_second_claims_advance_the_version_and_a_lost_claim_writes_nothing(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x/ok")
    phid = phorge.request(hook)
    store = Store()
    first = store.claim(phorge.snapshot(phid), lease=60, retry_backoff=300)
    assert first is not None
    assert store.claim(phorge.snapshot(phid), lease=60, retry_backoff=300) is None  # under a live lease
    # A lease that has already run out (negative lease) lets a second claimer in within the same second.
    second = store.claim(phorge.snapshot(phid), lease=-5, retry_backoff=300)
    assert second is not None and second > first
    lost = store.write_outcome(
        phorge.snapshot(phid).id, first, status="sent", result="okay", attempted=True, properties="{}"
    )
    assert lost is None
    assert phorge.row(phid)["status"] == "queued"
    won = store.write_outcome(
        phorge.snapshot(phid).id, second, status="sent", result="okay", attempted=True, properties=None
    )
    assert won is not None
    assert phorge.row(phid)["status"] == "sent"


ROWS = st.builds(
    dict,
    status=st.sampled_from(["queued", "sent", "failed"]),
    created=st.integers(1_000_000, 1_000_050),
    modified_delta=st.integers(0, 120),
    result=st.sampled_from(["none", "okay", "fail"]),
    epoch_delta=st.integers(-5, 120),
    now_delta=st.integers(0, 400),
    lease=st.integers(1, 90),
    retry=st.integers(0, 300),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ROWS)
def test_python_and_sql_due_rules_agree(phorge: Phorge, case: dict[str, int | str]) -> None:
    created = int(case["created"])
    modified = created + int(case["modified_delta"])
    epoch = 0 if case["result"] == "none" else max(created, modified - int(case["epoch_delta"]))
    now = modified + int(case["now_delta"])
    row = RequestRow(1, "p", "h", "o", str(case["status"]), str(case["result"]), epoch, created, modified)
    dialect = Dialect(connections["phorge"].vendor)
    sql = (
        f"SELECT {dialect.due_sql(now='%(now)s')} FROM (SELECT %(status)s AS status, %(created)s AS dateCreated, "
        "%(modified)s AS dateModified, %(result)s AS lastRequestResult, %(epoch)s AS lastRequestEpoch) AS t"
    )
    params = {
        "now": now,
        "status": row.status,
        "created": created,
        "modified": modified,
        "result": row.last_result,
        "epoch": epoch,
        "lease": case["lease"],
        "retry": case["retry"],
    }
    with connections["phorge"].cursor() as cursor:
        cursor.execute(sql, params)
        in_sql = bool(cursor.fetchone()[0])
    lease, retry = int(case["lease"]), int(case["retry"])
    assert in_sql == is_due(row, now, lease, retry)
    if row.status == "queued":
        assert is_due(row, max(now, next_due(row, lease, retry)), lease, retry)


BREAKER_ROWS = st.builds(
    dict,
    result=st.sampled_from(["none", "okay", "fail"]),
    epoch=st.integers(0, 2_000),
    window_start=st.integers(0, 2_000),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(BREAKER_ROWS)
def test_python_and_sql_breaker_rules_agree(phorge: Phorge, case: dict[str, int | str]) -> None:
    sql = (
        f"SELECT {Dialect.breaker_failure_sql('%(start)s')} "
        "FROM (SELECT %(result)s AS lastRequestResult, %(epoch)s AS lastRequestEpoch) AS t"
    )
    with connections["phorge"].cursor() as cursor:
        cursor.execute(sql, {"start": case["window_start"], "result": case["result"], "epoch": case["epoch"]})
        in_sql = bool(cursor.fetchone()[0])
    assert in_sql == counts_toward_breaker(str(case["result"]), int(case["epoch"]), int(case["window_start"]))


def test_backoff_lasts_from_the_thresholdth_newest_failure() -> None:
    assert backoff_until([100, 90, 80], threshold=3, window=300) == 381
    assert backoff_until([100, 90], threshold=3, window=300) is None


@pytest.mark.slow
def test_slow_receiver_is_called_exactly_once_per_request(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver(slow_seconds=0.4) as receiver:
        hooks = [phorge.hook(receiver.url(f"/slow{i}/slow")) for i in range(3)]
        phids = [phorge.request(hook, retry="forever") for hook in hooks for _ in range(3)]
        config = dataclasses.replace(delivery_config, poll_interval_ms=20)
        run_until(config, lambda: all(phorge.row(p)["status"] == "sent" for p in phids))
        time.sleep(0.3)
        assert len(receiver.requests) == len(phids)
        assert max(receiver.state.max_in_flight.values()) == 1


def test_a_hook_in_error_backoff_does_not_hold_back_other_hooks(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        broken = phorge.hook(receiver.url("/broken/s500"))
        healthy = phorge.hook(receiver.url("/healthy/ok"))
        now = phorge.now()
        for _ in range(10):
            phorge.request(broken, status="failed", lastRequestResult="fail", lastRequestEpoch=now, dateModified=now)
        stuck = [phorge.request(broken, retry="forever") for _ in range(40)]
        fine = [phorge.request(healthy) for _ in range(5)]
        config = dataclasses.replace(delivery_config, error_threshold=10, error_backoff_sec=300)
        build_worker(config, once=True, max_concurrent=1).run()
        assert all(phorge.row(p)["status"] == "sent" for p in fine)
        assert all(phorge.row(p)["lastRequestResult"] == "none" for p in stuck)
        assert [r.path for r in receiver.requests] == ["/healthy/ok"] * 5


def test_breaker_trips_after_the_threshold_and_stops_calling(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        broken = phorge.hook(receiver.url("/broken/s500"))
        for _ in range(8):
            phorge.request(broken, retry="forever")
        config = dataclasses.replace(delivery_config, error_threshold=3, error_backoff_sec=300)
        build_worker(config, once=True).run()
        assert len(receiver.requests) == 3
        results = Counter(row["lastRequestResult"] for row in phorge.rows())
        assert results == {"fail": 3, "none": 5}


@pytest.mark.slow
def test_forever_retry_waits_the_retry_backoff_not_the_lease(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/flaky/s503"))
        phid = phorge.request(hook, retry="forever")
        config = dataclasses.replace(delivery_config, retry_backoff_sec=2, claim_lease_sec=30, poll_interval_ms=50)
        run_until(config, lambda: len(receiver.requests) >= 3, timeout=15)
        times = [r.at for r in receiver.requests]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(1.0 <= gap <= 3.5 for gap in gaps), gaps  # whole-second database clock
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"]) == ("queued", "fail")
        assert row["properties"].endswith(',"errorType":"http","errorCode":503}')


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "retry_after", "backoff", "honor", "least", "most"),
    [
        ("s503", "4", 1, True, 3.9, 8.0),  # the receiver's wait, longer than Phorge's backoff
        ("s429", "4", 1, True, 3.9, 8.0),
        ("s503", "4", 1, False, 0.0, 3.5),  # off (the default): Phorge's backoff alone
        ("s503", "1", 3, True, 2.0, 5.5),  # never sooner than Phorge's backoff (a whole-second clock)
        ("s500", "4", 1, True, 0.0, 3.5),  # a 500's Retry-After asks nothing of us
    ],
)
def test_retry_after_holds_the_hook_back_when_honored_and_changes_nothing_sent_or_recorded(
    phorge: Phorge,
    delivery_config: Any,
    answer: str,
    retry_after: str,
    backoff: int,
    honor: bool,
    least: float,
    most: float,
) -> None:
    with Receiver() as receiver:
        receiver.state.retry_after = retry_after
        phid = phorge.request(phorge.hook(receiver.url(f"/busy/{answer}")), retry="forever")
        config = dataclasses.replace(
            delivery_config,
            retry_backoff_sec=backoff,
            claim_lease_sec=30,
            poll_interval_ms=50,
            honor_retry_after=honor,
        )
        run_until(config, lambda: len(receiver.requests) >= 2, timeout=20)
        first, second = receiver.requests[:2]
        assert least <= second.at - first.at <= most, second.at - first.at
        assert (second.raw_head, second.body) == (first.raw_head, first.body), "the same bytes, signature included"
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"]) == ("queued", "fail")
        assert row["properties"].endswith(f',"errorType":"http","errorCode":{answer[1:]}}}')


def test_never_retry_fails_for_good(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/gone/s410")), retry="never")
        build_worker(dataclasses.replace(delivery_config, retry_backoff_sec=0), once=True).run()
        build_worker(dataclasses.replace(delivery_config, retry_backoff_sec=0), once=True).run()
        assert len(receiver.requests) == 1
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"]) == ("failed", "fail")


def test_undecodable_properties_fail_with_the_column_untouched(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/h/ok"))
        broken = '{"retry":"forever",'
        phid = phorge.request(hook, properties=broken)
        build_worker(delivery_config, once=True).run()
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
        assert row["properties"] == broken
        assert receiver.requests == []


def test_empty_hmac_key_leaves_requests_queued_and_untouched(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        unsigned = phorge.hook(receiver.url("/unsigned/ok"), key="")
        signed = phorge.hook(receiver.url("/signed/ok"))
        waiting = phorge.request(unsigned)
        before = phorge.row(waiting)
        delivered = phorge.request(signed)
        worker = build_worker(delivery_config, once=True)
        worker.run()
        assert phorge.row(waiting) == before
        assert phorge.row(delivered)["status"] == "sent"
        assert [r.path for r in receiver.requests] == ["/signed/ok"]
        assert worker.snapshot().hooks_misconfigured == (unsigned,)


@pytest.mark.parametrize(
    ("status", "code"),
    [("disabled", "disabled"), ("missing", "not-found")],
)
def test_configuration_failures(phorge: Phorge, delivery_config: Any, status: str, code: str) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/c/ok"), status="disabled" if status == "disabled" else "enabled")
        phid = phorge.request(hook, retry="forever")
        if status == "missing":
            phorge.execute("DELETE FROM herald_webhook")
        build_worker(delivery_config, once=True).run()
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
        assert row["properties"].endswith(f',"errorType":"hook","errorCode":"{code}"}}')
        assert receiver.requests == []


def test_old_rows_below_the_frontier_and_late_commits_are_found(phorge: Phorge, delivery_config: Any) -> None:
    """The tracker reads new rows by id range: a row that appears below the frontier is still delivered."""
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/late/ok"))
        first = phorge.request(hook)
        gap_id = phorge.row(first)["id"] + 1
        phorge.execute("ALTER TABLE herald_webhookrequest AUTO_INCREMENT = %s" % (gap_id + 1))
        second = phorge.request(hook)
        worker = build_worker(dataclasses.replace(delivery_config, poll_interval_ms=20))
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while phorge.row(second)["status"] != "sent":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            late = phorge.request(hook, id=gap_id)  # committed after a higher id was already seen
            while phorge.row(late)["status"] != "sent":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            worker.stop()
            thread.join(30)
        assert len(receiver.requests) == 3


@pytest.mark.slow
def test_breaker_entry_and_exit_are_logged_once_each(
    phorge: Phorge, delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with Receiver() as receiver:
        broken = phorge.hook(receiver.url("/broken/s500"))
        for _ in range(6):
            phorge.request(broken, retry="forever")
        config = dataclasses.replace(
            delivery_config, error_threshold=2, error_backoff_sec=2, retry_backoff_sec=30, poll_interval_ms=20
        )
        caplog.set_level(logging.INFO, logger="webhook_delivery")

        run_until(config, lambda: with_event(caplog.records, "breaker.left"), timeout=15)
        transitions = [record.event for record in with_event(caplog.records, "breaker.entered", "breaker.left")]
        # About a hundred polls passed while the hook was in backoff: one line per change of state, no more.
        assert transitions[:2] == ["breaker.entered", "breaker.left"]
        assert all(a != b for a, b in itertools.pairwise(transitions))
        assert len(receiver.requests) >= 3  # delivery resumed after the window


UNICODE_DIGIT_KEYS = {
    "superscript two": '{"retry":"forever","transactionPHIDs":{"\\u00b2":"PHID-XACT-TASK-aaaaaaaaaaaaaaa"}}',
    "arabic-indic three": '{"retry":"never","transactionPHIDs":{"1":"PHID-XACT-TASK-a","\\u0663":"PHID-XACT-TASK-b"}}',
}


@PHORGE_DB
@pytest.mark.parametrize("name", sorted(UNICODE_DIGIT_KEYS))
def test_a_unicode_digit_transaction_key_is_unsendable_without_a_traceback(
    phorge: Any, receiver: Any, delivery_config: Any, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    import dataclasses
    import logging

    from webhook_delivery.worker.loop import build_worker

    caplog.set_level(logging.DEBUG)
    properties = UNICODE_DIGIT_KEYS[name]
    hook = phorge.hook(receiver.url("/unicode-keys/ok"))
    phid = phorge.request(hook, properties=properties)
    build_worker(dataclasses.replace(delivery_config, retry_backoff_sec=0), once=True).run()
    row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
    assert row["properties"] == properties  # byte for byte as stored
    assert receiver.requests == []  # settled before any call
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert not with_event(caplog.records, "job.unexpected_error", "delivery.unexpected_error")
    reasons = [str(r.__dict__.get("reason", "")) + r.getMessage() for r in caplog.records]
    assert any("not a transaction ID" in reason for reason in reasons), reasons


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    offenders = [r.getMessage() for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert offenders == []


DEEP = 600


CORPUS: dict[str, str] = {
    "number beyond a double": '{"retry":"never","x":1e400,"triggerPHIDs":[]}',
    "negative beyond a double": '{"retry":"forever","x":-1e999}',
    "nested deeper than we encode": '{"retry":"forever","deep":' + "[" * DEEP + "]" * DEEP + "}",
    "nested deeper than we decode": '{"retry":"never","deep":' + "[" * 5000 + "]" * 5000 + "}",
    "not JSON": '{"retry":"forever",',
    "a JSON string": '"retry"',
    "a JSON number": "1",
    "JSON null": "null",
    "an empty list": "[]",
    "NUL in a PHID": '{"retry":"never","triggerPHIDs":["PHID-USER-\\u0000x"]}',
    "lone surrogate": '{"retry":"never","triggerPHIDs":["PHID-USER-\\ud800"]}',
    "huge string": '{"retry":"never","triggerPHIDs":["' + "a" * 300_000 + '"]}',
    "retry a number": '{"retry":1}',
    "retry a list": '{"retry":["forever"]}',
    "transactions a string": '{"retry":"never","transactionPHIDs":"PHID-XACT-TASK-aaaaaaaaaaaaaaa"}',
    "transactions numbers": '{"retry":"never","transactionPHIDs":[1,2.5,null]}',
    "transactions objects": '{"retry":"never","transactionPHIDs":[{"a":1},[2]]}',
    "transactions map of lists": '{"retry":"never","transactionPHIDs":{"1":[1],"2":{"x":"y"}}}',
    "triggers a string": '{"retry":"never","triggerPHIDs":"PHID-USER-aaaaaaaaaaaaaaaaaaaa"}',
    "triggers mixed": '{"retry":"never","triggerPHIDs":[1,null,true,[],{"a":"b"},1.5]}',
    "flags of every type": '{"retry":"never","silent":"yes","secure":[1],"test":{"a":1}}',
    "flags numbers": '{"retry":"never","silent":1.5,"secure":0,"test":null}',
    "old error of odd types": '{"retry":"never","errorType":[],"errorCode":{"x":1}}',
    "keys of a list": '["forever",{"a":1}]',
}


class FlakyStore:
    """The worker's store, whose first result write fails as a dropped connection would."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def write_outcome(self, *args: Any, **kwargs: Any) -> int | None:
        if not self.failed:
            self.failed = True
            raise OperationalError(2013, "Lost connection to server during query")
        return self.store.write_outcome(*args, **kwargs)


def test_no_row_of_the_bad_row_corpus_is_sent_twice_loops_or_logs_a_traceback(
    phorge: Phorge, delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/bad/ok"))
        rows = {name: phorge.request(hook, properties=text) for name, text in CORPUS.items()}
        odd_object = phorge.request(hook, object_phid=b"PHID-TASK-\xff\xfe\x00x")  # type: ignore[arg-type]
        config = dataclasses.replace(delivery_config, retry_backoff_sec=0, claim_lease_sec=8)
        for _ in range(2):  # a second run finds nothing left to do
            build_worker(config, once=True).run()
        sent_bodies = [r.body for r in receiver.requests]
        assert len(sent_bodies) == len({r.body for r in receiver.requests})  # nothing POSTed twice
        for name, phid in [*rows.items(), ("odd object", odd_object)]:
            row = phorge.row(phid)
            assert row["status"] in ("sent", "failed"), (name, row["status"], row["lastRequestResult"])
            if row["status"] == "failed":
                assert (row["lastRequestResult"], row["lastRequestEpoch"]) == ("none", 0), name
        poisoned = ["number beyond a double", "negative beyond a double", "not JSON", "a JSON string", "JSON null"]
        for name in poisoned:
            row = phorge.row(rows[name])
            assert row["properties"] == CORPUS[name], name  # left byte for byte as it was
        assert len(receiver.requests) <= len(CORPUS) + 1
    no_tracebacks(caplog)


def test_a_row_sent_but_not_writable_is_never_sent_again(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/inf/ok"))
        phid = phorge.request(hook, properties='{"retry":"forever","x":1e400}')
        config = dataclasses.replace(delivery_config, claim_lease_sec=1, retry_backoff_sec=0)
        for _ in range(3):
            build_worker(config, once=True).run()
        assert receiver.requests == []  # refused before any POST, as the column cannot take the result
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)


def test_every_post_of_a_job_happens_under_the_hook_lock_across_a_failed_write(
    phorge: Phorge, delivery_config: Any
) -> None:
    namespace = django_settings.GORGE_WEBHOOK.namespace
    watcher = mysql_admin()
    holders: list[Any] = []

    def check_lock(received: Any) -> None:
        cursor = watcher.cursor()
        cursor.execute("SELECT IS_USED_LOCK(%s)", (webhook_lock_name(namespace, hook),))
        holders.append(cursor.fetchone()[0])

    with Receiver(on_receive=check_lock) as receiver:
        hook = phorge.hook(receiver.url("/locked/ok"))
        phids = [phorge.request(hook) for _ in range(4)]
        parts = build_parts(delivery_config, dispatcher=Dispatcher(delivery_config))
        parts.store = FlakyStore(parts.store)
        worker = Worker(delivery_config, parts)
        try:
            result = worker.runner.run(Job(hook, worker.reader.hooks()[hook], [phorge.snapshot(p) for p in phids]))
        finally:
            parts.closing.close()
            watcher.close()
    assert len(receiver.requests) == 4 and not result.database_error
    assert all(holder is not None for holder in holders) and len(set(holders)) == 1
    assert all(phorge.row(p)["status"] == "sent" for p in phids)


@pytest.mark.slow
def test_a_slow_silent_mode_read_delays_the_claim_not_the_attempt(
    phorge: Phorge, delivery_config: Any, app_databases: Any
) -> None:
    """Silent mode is settled before a row is claimed, and the attempt's deadline runs from the claim: a
    config read that hangs longer than the whole timeout costs no request its attempt."""
    app_databases.create(["config"])
    app_databases.config("phabricator.silent", "false")
    locker = mysql_admin()
    cursor = locker.cursor()
    cursor.execute(f"LOCK TABLES {app_databases.table('config', 'config_entry')} WRITE")
    unlock = threading.Timer(4.0, cursor.execute, args=("UNLOCK TABLES",))
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/late/ok")), retry="never")
        config = dataclasses.replace(delivery_config, delivery_timeout=2.0, claim_lease_sec=8, silent=None)
        started = time.monotonic()
        unlock.start()
        try:
            build_worker(config, once=True).run()
        finally:
            unlock.join()
            locker.close()
        assert time.monotonic() - started >= 4.0  # the read waited for the lock
        assert len(receiver.requests) == 1
    row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"]) == ("sent", "okay")
