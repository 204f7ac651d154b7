"""Bad rows, bad hosts, careless runs: nothing lost, nothing sent twice, nothing leaked, no traceback.

Here: what runs on Django's test databases; the rest is in tests/process/test_bad_input.py."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import threading
import time
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import OperationalError
from django.test import Client

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin
from tests.support.receiver import Receiver
from webhook_delivery.phorge.locks import webhook_lock_name
from webhook_delivery.worker.dispatcher import Dispatcher
from webhook_delivery.worker.job import Job
from webhook_delivery.worker.loop import Worker, build_worker
from webhook_delivery.worker.parts import build_parts

pytestmark = PHORGE_DB


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    offenders = [r.getMessage() for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert offenders == []


def test_the_suite_refuses_a_database_name_it_did_not_generate() -> None:
    from tests.support.helpers import throwaway_name

    assert throwaway_name(f"gwtest{os.getpid()}_herald")
    for name in ("phabricator_herald", "gwtest_herald", "gwtest12_herald_x", "prod_gwtest1_herald", "gwtest1"):
        assert not throwaway_name(name)


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


@pytest.mark.parametrize(
    "uri",
    [
        "http://a..example.com/",
        f"http://{'a' * 64}.example.com/",
        f"http://{'abc.' * 70}com/",
        "http://.example.com/",
        "http://exa mple.com/",
    ],
)
def test_malformed_host_names_fail_for_good_without_a_call(
    phorge: Phorge, delivery_config: Any, uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    phid = phorge.request(phorge.hook(uri), retry="forever")
    build_worker(dataclasses.replace(delivery_config, outbound_blacklist=()), once=True).run()
    row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
    assert row["properties"].endswith(',"errorType":"hook","errorCode":"uri"}')
    no_tracebacks(caplog)


@pytest.fixture
def staff(transactional_db: None) -> Client:
    user = User.objects.create_user("viewer", password="pw-viewer-123456", is_staff=True)
    from django.contrib.auth.models import Permission

    user.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "query",
    [
        "hmac_key__startswith=abc",
        "hmac_key=abc",
        "hmac_key__exact=abc",
        "hmac_key__regex=^a",
        "hmac_key__in=a,b",
        "hmac_key__gt=m",
        "hmacKey__startswith=abc",
        "webhook_uri__contains=example",
        "webhook_uri__icontains=secret",
        "webhook_uri__startswith=http",
        "webhook_uri__isnull=False",
        "name__regex=.",
        "phid__startswith=PHID",
    ],
)
def test_the_hook_list_refuses_lookups_on_secrets_and_anything_not_offered(
    phorge: Phorge, staff: Client, query: str
) -> None:
    phorge.hook("http://example.com/secret-token", key="abcdefghijklmnopqrstuvwxyz234567")
    response = staff.get(f"/admin/webhook_delivery/heraldwebhook/?{query}")
    assert response.status_code == 400
    assert b"abcdefghij" not in response.content and b"secret-token" not in response.content


@pytest.mark.parametrize(
    "query", ["properties__contains=retry", "webhook_phid__startswith=PHID", "object_phid__regex=.", "id__gt=0"]
)
def test_the_request_list_refuses_lookups_it_does_not_offer(phorge: Phorge, staff: Client, query: str) -> None:
    phorge.request(phorge.hook("http://example.com/"))
    assert staff.get(f"/admin/webhook_delivery/heraldwebhookrequest/?{query}").status_code == 400


def test_the_offered_filters_and_search_still_work(phorge: Phorge, staff: Client) -> None:
    hook = phorge.hook("http://example.com/", name="listed")
    phorge.request(hook)
    assert staff.get("/admin/webhook_delivery/heraldwebhook/?status__exact=enabled").status_code == 200
    assert staff.get(f"/admin/webhook_delivery/heraldwebhook/?q={hook}").status_code == 200
    requests_list = "/admin/webhook_delivery/heraldwebhookrequest/"
    assert staff.get(f"{requests_list}?status__exact=queued&last_request_result__exact=none").status_code == 200


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


def test_every_post_of_a_job_happens_under_the_hook_lock_across_a_failed_write(
    phorge: Phorge, delivery_config: Any
) -> None:
    namespace = settings.GORGE_WEBHOOK.namespace
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


def test_text_log_lines_name_the_request_the_hook_and_the_reason(phorge: Phorge, delivery_config: Any) -> None:
    from webhook_delivery.logformat import TextFormatter

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logging.getLogger("webhook_delivery").addHandler(handler)
    try:
        with Receiver() as receiver:
            hook = phorge.hook(receiver.url("/down/s503"))
            phid = phorge.request(hook)
            refused = phorge.request(phorge.hook("http://a..example.com/"))
            build_worker(dataclasses.replace(delivery_config, outbound_blacklist=()), once=True).run()
    finally:
        logging.getLogger("webhook_delivery").removeHandler(handler)
    lines = [TextFormatter().format(record) for record in records]
    failed = next(line for line in lines if "webhook request failed" in line and phid in line)
    assert f"request={phid}" in failed and f"hook={hook}" in failed and "error_type=http" in failed
    assert "error_code=503" in failed
    uri = next(line for line in lines if "webhook URI refused" in line)
    assert f"request={refused}" in uri and "reason=" in uri
    assert "a..example.com" not in "\n".join(lines)  # never the URI


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


def test_metrics_read_phorge_at_most_once_per_few_seconds(phorge: Phorge, client: Client) -> None:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from webhook_delivery.web.metrics import COLLECTOR

    phorge.request(phorge.hook("http://example.com/"))
    COLLECTOR.forget()
    with CaptureQueriesContext(connections["phorge"]) as first:
        assert client.get("/metrics").status_code == 200
    with CaptureQueriesContext(connections["phorge"]) as later:
        for _ in range(20):
            assert client.get("/metrics").status_code == 200
    assert len(first.captured_queries) > 0
    assert len(later.captured_queries) == 0


def test_nat64_and_6to4_addresses_are_judged_by_the_ipv4_address_they_reach() -> None:
    from webhook_delivery.config import default_blacklist, parse_blacklist
    from webhook_delivery.phorge.netguard import is_blocked, local_gaps

    default = default_blacklist()
    public, private = "93.184.216.34", "10.1.2.3"
    assert not is_blocked(ipaddress.ip_address(f"64:ff9b::{public}"), default)  # DNS64 for a public host
    assert is_blocked(ipaddress.ip_address(f"64:ff9b::{private}"), default)
    assert is_blocked(ipaddress.ip_address("64:ff9b::127.0.0.1"), default)
    six_to_four = ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(private)) << 80) | 1)
    assert is_blocked(six_to_four, default)
    assert not is_blocked(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(public)) << 80)), default)
    assert is_blocked(ipaddress.ip_address("::ffff:10.0.0.1"), default)
    assert is_blocked(ipaddress.ip_address("fd00::1"), default)
    ipv4_only = parse_blacklist("10.0.0.0/8,127.0.0.0/8,169.254.0.0/16")
    assert is_blocked(ipaddress.ip_address("64:ff9b::a00:1"), ipv4_only)  # 10.0.0.1 through NAT64
    assert local_gaps(ipv4_only) == [
        "this host 0.0.0.0/8",
        "unspecified ::/128",
        "loopback ::1/128",
        "IPv4-mapped ::ffff:0:0/96",
        "unique-local fc00::/7",
        "link-local fe80::/10",
    ]
    assert local_gaps(default) == [] and local_gaps(()) == []


def test_the_example_blacklist_blocks_every_way_to_this_host_and_a_blank_value_is_an_error() -> None:
    from webhook_delivery.config import load_config, parse_blacklist
    from webhook_delivery.phorge.netguard import is_blocked, local_gaps

    line = next(
        line for line in (ROOT / ".env.example").read_text().splitlines() if "GORGE_WEBHOOK_OUTBOUND_BLACKLIST=" in line
    )
    example = parse_blacklist(line.split("=", 1)[1])
    for address in ["0.0.0.0", "0.1.2.3", "127.0.0.1", "::", "::1", "::ffff:127.0.0.1", "::ffff:0.0.0.0", "fe80::1"]:
        assert is_blocked(ipaddress.ip_address(address), example), address
    assert local_gaps(example) == []
    blank = load_config({"GORGE_WEBHOOK_OUTBOUND_BLACKLIST": "  \t "})
    assert [e.variable for e in blank.errors] == ["GORGE_WEBHOOK_OUTBOUND_BLACKLIST"]
    assert "only blanks" in blank.errors[0].message
    assert load_config({"GORGE_WEBHOOK_OUTBOUND_BLACKLIST": ""}).errors == ()


def test_international_names_follow_idna_2008() -> None:
    from webhook_delivery.phorge.netguard import parse_target

    assert parse_target("http://faß.de/").host == "xn--fa-hia.de"  # IDNA 2003 would say fass.de
    assert parse_target("https://bücher.example/x").host == "xn--bcher-kva.example"


def test_the_next_permitted_address_is_tried_when_the_first_refuses(phorge: Phorge, delivery_config: Any) -> None:
    def two_addresses(host: str, port: int, timeout: float) -> list[Any]:
        return [ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")]

    with Receiver() as receiver:  # listens on 127.0.0.1 only: 127.0.0.2 refuses
        phid = phorge.request(phorge.hook(f"http://two.example.test:{receiver.port}/two/ok"))
        config = dataclasses.replace(delivery_config, outbound_blacklist=())
        build_worker(config, once=True, dispatcher=Dispatcher(config, resolver=two_addresses)).run()
        assert [r.path for r in receiver.requests] == ["/two/ok"]
        assert receiver.requests[0].header("Host") == f"two.example.test:{receiver.port}"
    assert phorge.row(phid)["status"] == "sent"


def test_an_unreadable_request_is_shown_as_such_on_the_dashboard(
    phorge: Phorge, delivery_config: Any, staff: Client
) -> None:
    text = '{"retry":"forever","x":1e400}'
    phid = phorge.request(phorge.hook("http://127.0.0.1:9/unreadable", name="unreadable hook"), properties=text)
    build_worker(delivery_config, once=True).run()
    assert phorge.row(phid)["properties"] == text
    page = staff.get("/").content.decode()
    failures = page[page.index('id="failures"') :]
    assert phid in failures and "Unreadable request (left as stored)" in failures
