"""`manage.py requeue_webhooks`: failed requests back to the queue, exactly the ones selected, delivered once.

Here: what runs on Django's test databases; the rest is in tests/process/test_requeue.py."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from django.core.management import CommandError

from tests.support.helpers import PHORGE_DB, Phorge, failed, requeue
from tests.support.receiver import Receiver
from webhook_delivery.phorge.config import REQUEST_RETENTION_SEC, request_retention
from webhook_delivery.worker.loop import build_worker
from webhook_delivery.worker.requeue import ErrorFilter, Requeue, RequeueError, parse_when
from webhook_delivery.worker.store import Store

pytestmark = PHORGE_DB


NOW = 1_764_580_000  # 2025-12-01 09:06:40 UTC


def test_times_and_errors_are_read_strictly() -> None:
    assert parse_when("2h", NOW) == NOW - 7200
    assert parse_when("90m", NOW) == NOW - 5400
    assert parse_when("09:00", NOW) == 1_764_579_600
    assert parse_when("2025-12-01T09:00", NOW) == 1_764_579_600
    assert parse_when("2025-12-01T10:00+01:00", NOW) == 1_764_579_600
    assert parse_when("2025-12-01", NOW) == 1_764_547_200
    for bad in ["yesterday", "25:00", "2h ago", "", "1e9"]:
        with pytest.raises(RequeueError, match="is not a time"):
            parse_when(bad, NOW)
    assert ErrorFilter.parse("http/503") == ErrorFilter("http", "503")
    assert ErrorFilter.parse("timeout").matches("timeout", "28")
    assert not ErrorFilter.parse("http/503").matches("http", "500")
    for bad in ["teapot", "http/5 03", "/503", "hook/<script>"]:
        with pytest.raises(RequeueError):
            ErrorFilter.parse(bad)
    assert request_retention(None) == 7 * 86400
    assert request_retention({"phd.garbage-collection": {"herald.webhooks": 86400}}) == 86400
    assert request_retention({"phd.garbage-collection": {"herald.webhooks": None}}) is None


@pytest.mark.slow
def test_dry_run_changes_nothing_and_the_real_run_requeues_exactly_the_selection_once(
    phorge: Phorge, delivery_config: Any
) -> None:
    with Receiver(hold_seconds=5) as receiver:
        slow = phorge.hook(receiver.url("/slow/timeout"), name="Slow receiver")
        busy = phorge.hook(receiver.url("/busy/s503"), name="Busy receiver")
        slow_rows = [phorge.request(slow) for _ in range(4)]
        busy_rows = [phorge.request(busy) for _ in range(2)]
        build_worker(dataclasses.replace(delivery_config, delivery_timeout=1.0), once=True).run()
        assert len(receiver.requests) == 6
    rows = {phid: phorge.row(phid) for phid in slow_rows + busy_rows}
    assert all(row["status"] == "failed" for row in rows.values())
    assert all('"errorType":"timeout"' in rows[phid]["properties"] for phid in slow_rows)
    earlier = phorge.now() - 7200  # one of the timeouts happened two hours ago: outside --since 1h
    phorge.execute(
        "UPDATE herald_webhookrequest SET lastRequestEpoch = %s, dateModified = %s WHERE phid = %s",
        (earlier, earlier, slow_rows[0]),
    )
    before = {row["phid"]: row for row in phorge.rows()}
    selection = ["--hook", slow, "--error", "timeout", "--since", "1h"]

    listed = requeue(*selection, "--dry-run")
    assert {row["phid"]: row for row in phorge.rows()} == before
    assert sorted(line.split("\t")[1] for line in listed.splitlines() if "\t" in line) == sorted(slow_rows[1:])
    assert "Would requeue 3 failed requests of 1 hook" in listed

    with Receiver() as fixed:  # the receiver is fixed: its administrator points the hook at it again
        phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", (fixed.url("/slow/ok"), slow))
        done = requeue(*selection)
        assert "Requeued 3 requests." in done
        after = {row["phid"]: row for row in phorge.rows()}
        for phid, row in after.items():
            if phid in slow_rows[1:]:
                assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("queued", "none", 0)
                assert row["dateModified"] == row["dateCreated"]
                assert row["properties"] == before[phid]["properties"]  # the last error stays until the next try
            else:
                assert row == before[phid], f"{phid} was not selected but changed"
        build_worker(delivery_config, once=True).run()
        build_worker(delivery_config, once=True).run()
        delivered = sorted(json.loads(r.body)["object"]["phid"] for r in fixed.requests)
    assert delivered == sorted(before[phid]["objectPHID"] for phid in slow_rows[1:])  # each exactly once
    assert [phorge.row(phid)["status"] for phid in slow_rows] == ["failed", "sent", "sent", "sent"]
    assert "Nothing to requeue" in requeue(*selection)


def test_requests_phorge_would_not_deliver_are_refused(phorge: Phorge) -> None:
    good = phorge.hook("http://127.0.0.1:9/good", name="good")
    off = phorge.hook("http://127.0.0.1:9/off", status="disabled", name="off")
    unsigned = phorge.hook("http://127.0.0.1:9/unsigned", key="", name="unsigned")
    wanted = failed(phorge, good)
    left = [
        failed(phorge, off),
        failed(phorge, unsigned),
        failed(phorge, good, created=phorge.now() - 7 * 86400 + 600),  # collected by Phorge within minutes
        failed(phorge, good, result="none", properties="{not json"),
    ]
    before = {row["phid"]: row for row in phorge.rows()}
    out = requeue("--dry-run")
    assert [line.split("\t")[1] for line in out.splitlines() if "\t" in line] == [wanted]
    refusals = [line for line in out.splitlines() if line.startswith("Left failed: 1 (")]
    for reason in ["hook disabled", "no HMAC key", "garbage collection", "properties unreadable"]:
        assert sum(reason in line for line in refusals) == 1, reason
    assert "Requeued 1 request." in requeue()
    assert phorge.row(wanted)["status"] == "queued"
    assert all(phorge.row(phid) == before[phid] for phid in left)

    mistakes = {
        ("--hook", off): "is disabled: enable it in Phorge first",
        ("--hook", unsigned): "has no HMAC key",
        ("--hook", "PHID-HWBH-nosuchhooknosuchhook"): "no hook PHID-HWBH-nosuchhooknosuchhook in Phorge",
        ("--hook", "' OR 1=1 --"): "is not a PHID",
        ("--error", "teapot"): "expected timeout, http",
        ("--since", "last tuesday"): "is not a time",
        ("--since", "1h", "--until", "2h"): "--since is after --until",
    }
    said = [out]
    for args, message in mistakes.items():
        with pytest.raises(CommandError, match=message) as error:
            requeue(*args)
        said.append(str(error.value))
    keys = [k.decode() if isinstance(k, bytes) else k for (k,) in phorge.execute("SELECT hmacKey FROM herald_webhook")]
    for text in said:  # hook names and PHIDs only: never a URI or a key
        assert "127.0.0.1:9" not in text and not any(key and key in text for key in keys)
    assert all(phorge.row(phid) == before[phid] for phid in left)


def test_hook_errors_are_selected_by_when_they_were_written(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/h")
    recent = failed(phorge, hook, result="none", error='"errorType":"hook","errorCode":"uri"', ago=600)
    failed(phorge, hook, result="none", error='"errorType":"hook","errorCode":"uri"', ago=3 * 3600)
    failed(phorge, hook, ago=600)  # an HTTP failure: not this error
    out = requeue("--error", "hook/uri", "--since", "1h", "--dry-run")
    assert [line.split("\t")[1] for line in out.splitlines() if "\t" in line] == [recent]


def test_above_the_threshold_it_asks_unless_told_yes(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/many")
    phids = [failed(phorge, hook) for _ in range(101)]
    with pytest.raises(CommandError, match="101 requests match, more than 100: check them with --dry-run"):
        requeue()  # the test's stdin is no terminal: it cannot ask
    assert all(phorge.row(phid)["status"] == "failed" for phid in phids)
    out = requeue("--yes")
    assert "Requeued 101 requests." in out and "... and 1 more" not in out  # 101 listed of at most 200
    assert all(phorge.row(phid)["status"] == "queued" for phid in phids)


def test_a_row_that_changed_after_it_was_read_is_left_alone(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/race")
    phids = [failed(phorge, hook) for _ in range(3)]
    runner = Requeue(Store(), REQUEST_RETENTION_SEC)
    plan = runner.plan([hook])
    assert len(plan.selected) == 3
    phorge.execute("UPDATE herald_webhookrequest SET dateModified = dateModified + 1 WHERE phid = %s", (phids[1],))
    applied = runner.apply(plan)
    assert len(applied.requeued) == 2 and applied.changed == 1
    assert [phorge.row(phid)["status"] for phid in phids] == ["queued", "failed", "queued"]


HUGE_TIMES = [
    ("--since", "99999999999999999999d", "is out of range"),
    ("--until", "9999-12-31T23:59:59-23:59", "is out of range"),
    ("--since", "9" * 5000, "is not a time"),
    ("--since", "9" * 5000 + "d", "is out of range"),
    ("--until", "1969-12-31T23:59:59", "is out of range"),
]


def _unsafe(text: str, ours: str = "\n") -> list[str]:
    """The control characters in `text` but those the output itself uses (`ours`)."""
    return [c for c in text if (ord(c) < 0x20 and c not in ours) or 0x7F <= ord(c) <= 0x9F or c == "\u202e"]


@PHORGE_DB
@pytest.mark.parametrize(("option", "value", "says"), HUGE_TIMES, ids=[t[1][:30] for t in HUGE_TIMES])
def test_requeue_refuses_times_out_of_range_with_a_clear_error(phorge: Any, option: str, value: str, says: str) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError) as caught:
        call_command("requeue_webhooks", option, value, "--dry-run")
    message = str(caught.value)
    assert message.startswith(f"{option} ") and says in message
    assert len(message) < 300  # the value is shortened, not repeated 5,000 digits long


@PHORGE_DB
def test_requeue_escapes_hook_names_and_phorge_text_on_the_terminal(phorge: Any) -> None:
    import io

    from django.core.management import CommandError, call_command

    forged = "x\x1b[2K\rRequeued 999 requests.\u202e\x07"
    hook = phorge.hook("http://127.0.0.1:9/", name=forged)
    at = phorge.now() - 60
    phorge.request(
        hook,
        status="failed",
        properties='{"retry":"never","transactionPHIDs":[],"triggerPHIDs":[],"errorType":"http","errorCode":503}',
        lastRequestResult="fail",
        lastRequestEpoch=at,
        dateModified=at,
    )
    out = io.StringIO()
    call_command("requeue_webhooks", "--dry-run", stdout=out)
    text = out.getvalue()
    assert _unsafe(text, ours="\n\t") == []  # tabs separate the columns
    assert "x\\x1b[2K\\rRequeued 999 requests.\\u202e\\x07" in text
    assert not any(line.startswith("Requeued") for line in text.splitlines())
    phorge.execute("UPDATE herald_webhook SET status = 'disabled' WHERE phid = %s", [hook])
    with pytest.raises(CommandError) as caught:  # errors that name a hook escape its name too
        call_command("requeue_webhooks", "--hook", hook, "--dry-run", stdout=io.StringIO())
    assert _unsafe(str(caught.value)) == [] and "\\x1b[2K" in str(caught.value)


def test_queued_makes_what_waits_on_its_retry_backoff_due_at_once_without_writing_phorges_rows(phorge: Phorge) -> None:
    from webhook_delivery.records.models import OperatorAction
    from webhook_delivery.records.retries import in_force

    hook = phorge.hook("http://127.0.0.1:9/x", name="Outage hook")
    other = phorge.hook("http://127.0.0.1:9/y", name="Quiet hook")
    now = phorge.now()
    rows = [
        phorge.request(hook, retry="forever", lastRequestResult="fail", lastRequestEpoch=at, dateModified=at)
        for at in (now - 120, now - 60)
    ]
    before = {phid: phorge.row(phid) for phid in rows}
    dry = requeue("--queued", "--dry-run")
    assert "Would make due at once: 2 queued requests of 1 hook waiting on their retry backoff" in dry
    assert rows[0] in dry and "Outage hook" in dry and in_force() == {}
    with pytest.raises(CommandError, match="--queued takes --hook only"):
        requeue("--queued", "--since", "1h")
    done = requeue("--queued", "--hook", hook)
    assert "Made due at once: 2 queued requests of 1 hook" in done and "no row of Phorge's was changed" in done
    assert set(in_force()) == {hook} and all(phorge.row(phid) == row for phid, row in before.items())
    (action,) = OperatorAction.objects.filter(kind="retry")
    assert (action.requested_by, action.state, action.requeued) == ("cli", "done", 2)
    assert "Nothing waits: 0 queued requests of 0 hooks" in requeue("--queued", "--hook", other)
