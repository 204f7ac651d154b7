"""The attempt log: one row per processing, in Django's own database, written off the delivery path."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections
from prometheus_client import REGISTRY

from tests.support.helpers import PHORGE_DB, Phorge, with_event
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for
from webhook_delivery.records.models import DeliveryAttempt
from webhook_delivery.worker.attempts import prune
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB


def attempts_of(phid: str) -> list[DeliveryAttempt]:
    return list(DeliveryAttempt.objects.filter(request_phid=phid))


@pytest.mark.slow
def test_every_kind_of_attempt_is_one_row_with_its_fields(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver(hold_seconds=10) as receiver:
        kinds = {
            "sent": phorge.request(phorge.hook(receiver.url("/a/ok"))),
            "http error": phorge.request(phorge.hook(receiver.url("/b/s503")), retry="forever"),
            "timeout": phorge.request(phorge.hook(receiver.url("/c/timeout"))),
            "refused": phorge.request(phorge.hook(f"http://127.0.0.2:{receiver.port}/d/ok")),
            "redirected": phorge.request(phorge.hook(receiver.url("/e/r307"))),
            "disabled": phorge.request(phorge.hook(receiver.url("/f/ok"), status="disabled")),
        }
        config = dataclasses.replace(
            delivery_config,
            delivery_timeout=2.0,
            outbound_blacklist=(ipaddress.ip_network("127.0.0.2/32"),),
            attempt_log_body_bytes=64,
        )
        worker = build_worker(config, once=True)
        worker.run()
    rows = {kind: attempts_of(phid) for kind, phid in kinds.items()}
    assert {kind: len(found) for kind, found in rows.items()} == dict.fromkeys(kinds, 1)
    one = {kind: found[0] for kind, found in rows.items()}
    fields = {
        kind: (a.status, a.result, a.error_type, a.error_code, a.http_status, a.response_bytes, a.redirects)
        for kind, a in one.items()
    }
    assert fields == {
        "sent": ("sent", "okay", "http", "200", 200, 2, 0),
        "http error": ("queued", "fail", "http", "503", 503, 2, 0),
        "timeout": ("failed", "fail", "timeout", "28", None, None, 0),
        "refused": ("failed", "none", "hook", "uri", None, None, 0),
        "redirected": ("sent", "okay", "http", "200", 200, 2, 1),
        "disabled": ("failed", "none", "hook", "disabled", None, None, 0),
    }
    assert one["sent"].response_prefix == "ok"  # only because the deployment asked for 64 bytes
    assert 1900 <= one["timeout"].duration_ms <= 5000
    assert all(a.worker_id == worker.heartbeat.worker_id for a in one.values())
    assert all(a.hook_phid and a.object_phid.startswith("PHID-TASK-") for a in one.values())
    assert all(abs(a.started_at - datetime.now(UTC)) < timedelta(minutes=1) for a in one.values())


def test_no_answer_body_is_kept_unless_asked_for(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/a/ok")))
        build_worker(delivery_config, once=True).run()
    assert [a.response_prefix for a in attempts_of(phid)] == [""]


def test_hundreds_of_deliveries_are_all_recorded_in_batches(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        hooks = [phorge.hook(receiver.url(f"/many{i}/ok")) for i in range(4)]
        phids = [phorge.request(hooks[i % 4]) for i in range(300)]
        build_worker(delivery_config, once=True).run()
        assert len(receiver.requests) == 300
    assert DeliveryAttempt.objects.filter(request_phid__in=phids).count() == 300


def test_django_database_down_delivers_everything_and_counts_what_went_unrecorded(
    phorge: Phorge, delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    lost_before = REGISTRY.get_sample_value("gorge_webhook_attempt_log_lost_total") or 0.0
    with connections["default"].schema_editor() as editor:
        editor.delete_model(DeliveryAttempt)  # what a dropped table or a dead database looks like to the writer
    try:
        with Receiver() as receiver:
            phids = [phorge.request(phorge.hook(receiver.url(f"/down{i}/ok"))) for i in range(5)]
            build_worker(delivery_config, once=True).run()
            assert len(receiver.requests) == 5
    finally:
        with connections["default"].schema_editor() as editor:
            editor.create_model(DeliveryAttempt)
    assert all(phorge.row(phid)["status"] == "sent" for phid in phids)
    lost = (REGISTRY.get_sample_value("gorge_webhook_attempt_log_lost_total") or 0.0) - lost_before
    assert lost == 5
    said = with_event(caplog.records, "attempts.unwritable")
    assert len(said) == 1


def test_retention_keeps_the_days_and_the_count_per_hook(phorge: Phorge, delivery_config: Any) -> None:
    now = datetime.now(UTC)

    def attempt(hook: str, age: timedelta) -> DeliveryAttempt:
        return DeliveryAttempt(
            request_phid="PHID-HWBR-x",
            hook_phid=hook,
            object_phid="PHID-TASK-x",
            started_at=now - age,
            duration_ms=1.0,
            status="sent",
            result="okay",
            error_type="http",
            error_code="200",
            worker_id="w",
        )

    DeliveryAttempt.objects.bulk_create(
        [attempt("PHID-HWBH-old", timedelta(days=8)), attempt("PHID-HWBH-old", timedelta(days=1))]
        + [attempt("PHID-HWBH-busy", timedelta(seconds=i)) for i in range(30)]
    )
    config = dataclasses.replace(delivery_config, attempt_log_days=7, attempt_log_per_hook=10)
    assert prune(config) == 21
    assert DeliveryAttempt.objects.filter(hook_phid="PHID-HWBH-old").count() == 1
    kept = DeliveryAttempt.objects.filter(hook_phid="PHID-HWBH-busy").order_by("-started_at")
    assert kept.count() == 10 and kept.last().started_at == now - timedelta(seconds=9)  # type: ignore[union-attr]


def test_the_writer_names_every_column_of_the_model() -> None:
    from webhook_delivery.worker.attempts import COLUMNS

    model = {field.column for field in DeliveryAttempt._meta.concrete_fields if not field.primary_key}
    assert set(COLUMNS) == model and len(COLUMNS) == len(model)


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
