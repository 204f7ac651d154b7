"""Findings of the security review, each proven fixed with the real parts: the `mariadb` client fed the
output of print_grants, a real Worker and receiver, a real MariaDB database for Django's own tables.

Here: what runs on Django's test databases; the rest is in tests/unit/test_hardening.py,
tests/process/test_hardening.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from tests.support.helpers import PHORGE_DB, with_event
from tests.support.waiting import wait_for

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


HUGE_TIMES = [
    ("--since", "99999999999999999999d", "is out of range"),
    ("--until", "9999-12-31T23:59:59-23:59", "is out of range"),
    ("--since", "9" * 5000, "is not a time"),
    ("--since", "9" * 5000 + "d", "is out of range"),
    ("--until", "1969-12-31T23:59:59", "is out of range"),
]


@PHORGE_DB
@pytest.mark.parametrize(("option", "value", "says"), HUGE_TIMES, ids=[t[1][:30] for t in HUGE_TIMES])
def test_requeue_refuses_times_out_of_range_with_a_clear_error(phorge: Any, option: str, value: str, says: str) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError) as caught:
        call_command("requeue_webhooks", option, value, "--dry-run")
    message = str(caught.value)
    assert message.startswith(f"{option} ") and says in message
    assert len(message) < 300  # the value is shortened, not repeated 5,000 digits long


def _unsafe(text: str, ours: str = "\n") -> list[str]:
    """The control characters in `text` but those the output itself uses (`ours`)."""
    return [c for c in text if (ord(c) < 0x20 and c not in ours) or 0x7F <= ord(c) <= 0x9F or c == "\u202e"]


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


@PHORGE_DB
def test_text_log_lines_escape_control_characters_from_phorge_rows(phorge: Any, delivery_config: Any) -> None:
    import dataclasses
    import json
    import logging

    from tests.support.receiver import Receiver
    from webhook_delivery.logformat import JsonFormatter, TextFormatter
    from webhook_delivery.worker.loop import build_worker

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    evil = "PHID-HWBR-\x1b]0;owned\x07\x1b[2K\rforged\x7f\x85"
    handler = Keep()
    logging.getLogger("webhook_delivery").addHandler(handler)
    try:
        with Receiver() as receiver:
            hook = phorge.hook(receiver.url("/ctl/s503"))
            phorge.request(hook, phid=evil)
            build_worker(dataclasses.replace(delivery_config, retry_backoff_sec=0), once=True).run()
    finally:
        logging.getLogger("webhook_delivery").removeHandler(handler)
    failed = [r for r in records if r.__dict__.get("request") == evil]
    assert failed, [r.getMessage() for r in records]
    for record in failed:
        line = TextFormatter().format(record)
        assert _unsafe(line) == [] and "\n" not in line, repr(line)
        assert 'request="PHID-HWBR-\\u001b]0;owned\\u0007\\u001b[2K\\rforged\\u007f\\u0085"' in line
        entry = JsonFormatter().format(record)
        assert json.loads(entry)["request"] == evil  # JSON already escapes: still the same value
    record = logging.LogRecord("webhook_delivery", logging.ERROR, "", 0, "bad \x1b[2K name", None, None)
    assert TextFormatter().format(record).endswith("bad \\x1b[2K name")


PHORGE_HEADERS = ["Host", "User-Agent", "Accept", "Content-Type", "X-Phabricator-Webhook-Signature"]


@PHORGE_DB
def test_the_delivery_id_is_sent_only_for_configured_hooks_and_is_the_same_on_every_retry(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses

    from webhook_delivery.phorge.delivery_id import parse_delivery_id_hooks
    from webhook_delivery.worker.loop import build_worker

    chosen = phorge.hook(receiver.url("/dedup/s503"))
    other = phorge.hook(receiver.url("/plain/ok"))
    redirected = phorge.hook(receiver.url("/dedup-moved/r307"))
    retried = phorge.request(chosen, retry="forever")
    plain = phorge.request(other)
    moved = phorge.request(redirected)
    config = dataclasses.replace(
        delivery_config, retry_backoff_sec=0, delivery_id_hooks=parse_delivery_id_hooks(f"{chosen},{redirected}")
    )
    build_worker(config, once=True).run()  # the first attempt fails (503): the row stays queued, to be retried
    assert phorge.row(retried)["status"] == "queued"
    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", [receiver.url("/dedup/ok"), chosen])
    build_worker(config, once=True).run()
    assert phorge.row(retried)["status"] == "sent"

    to_chosen = [r for r in receiver.requests if r.path.startswith("/dedup/")]
    paths = [r.path for r in to_chosen]
    assert paths[-1] == "/dedup/ok" and len(paths) >= 2 and set(paths[:-1]) == {"/dedup/s503"}
    assert [r.header("webhook-id") for r in to_chosen] == [retried] * len(to_chosen)
    assert len({r.body for r in to_chosen}) == 1
    names = [name for name, _ in to_chosen[0].headers]
    assert names == [*PHORGE_HEADERS, "webhook-id", "Accept-Encoding", "Content-Length"]  # libcurl's order

    hops = [r for r in receiver.requests if r.path.startswith("/dedup-moved/")]
    assert [r.path for r in hops] == ["/dedup-moved/r307", "/dedup-moved/redirected"]
    assert [r.header("webhook-id") for r in hops] == [moved, moved]  # every hop

    unlisted = [r for r in receiver.requests if r.path.startswith("/plain/")]
    assert len(unlisted) == 1 and unlisted[0].header("webhook-id") is None
    assert [name for name, _ in unlisted[0].headers] == [*PHORGE_HEADERS, "Accept-Encoding", "Content-Length"]
    assert phorge.row(plain)["status"] == "sent"


@PHORGE_DB
def test_no_delivery_id_by_default_and_for_every_hook_with_a_star(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses

    from webhook_delivery.phorge.delivery_id import ALL
    from webhook_delivery.worker.loop import build_worker

    assert settings.GORGE_WEBHOOK.delivery_id_hooks.off  # unset: off
    hook = phorge.hook(receiver.url("/default/ok"))
    first = phorge.request(hook)
    build_worker(delivery_config, once=True).run()
    second = phorge.request(hook)
    build_worker(dataclasses.replace(delivery_config, delivery_id_hooks=ALL), once=True).run()
    assert [r.header("webhook-id") for r in receiver.requests] == [None, second]
    assert phorge.row(first)["status"] == phorge.row(second)["status"] == "sent"


@PHORGE_DB
def test_the_delivery_id_is_the_same_when_a_failed_request_is_requeued(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses
    import io

    from django.core.management import call_command

    from webhook_delivery.phorge.delivery_id import ALL
    from webhook_delivery.worker.loop import build_worker

    hook = phorge.hook(receiver.url("/again/s500"))
    phid = phorge.request(hook, retry="never")
    config = dataclasses.replace(delivery_config, delivery_id_hooks=ALL)
    build_worker(config, once=True).run()
    assert phorge.row(phid)["status"] == "failed"
    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", [receiver.url("/again/ok"), hook])
    call_command("requeue_webhooks", "--hook", hook, stdout=io.StringIO())
    build_worker(config, once=True).run()
    assert phorge.row(phid)["status"] == "sent"
    assert [(r.path, r.header("webhook-id")) for r in receiver.requests] == [("/again/s500", phid), ("/again/ok", phid)]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_record_that_fails_with_a_non_database_error_costs_only_itself_and_the_writer_lives_on(
    delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import time

    from webhook_delivery.records.models import DeliveryAttempt
    from webhook_delivery.worker.attempts import FLUSH_SEC, AttemptLog, AttemptRecord

    def record(phid: str, started_at: float) -> AttemptRecord:
        return AttemptRecord(phid, "PHID-HWBH-x", "PHID-TASK-x", started_at, 1.0, "sent", "okay", "http", "200", 200)

    caplog.set_level(logging.INFO, logger="webhook_delivery")
    log = AttemptLog(delivery_config, "w")
    now = time.time()
    for item in [record("PHID-HWBR-a", now), record("PHID-HWBR-nan", float("nan")), record("PHID-HWBR-b", now)]:
        log.record(item)  # the NaN time raises ValueError (not a DatabaseError) while the batch is built
    wait_for(
        lambda: set(DeliveryAttempt.objects.values_list("request_phid", flat=True)) == {"PHID-HWBR-a", "PHID-HWBR-b"},
        FLUSH_SEC * 10,
        "the batch written",
    )
    assert log._thread.is_alive()
    log.record(record("PHID-HWBR-later", time.time()))
    log.close()
    stored = set(DeliveryAttempt.objects.values_list("request_phid", flat=True))
    assert stored == {"PHID-HWBR-a", "PHID-HWBR-b", "PHID-HWBR-later"}
    said = [r.event for r in caplog.records if getattr(r, "event", "").startswith("attempts.")]
    assert said == ["attempts.record_dropped"]
