"""SSRF protection end to end, and every transport failure recorded the way PHP's libcurl records it.

Here: what runs on Django's test databases; the rest is in tests/unit/test_transport.py."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.arcanist import arcanist_tree
from tests.support.curl_oracle import php_records
from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.odd_answers import CASES, OK, CaseServer, TlsFiles
from tests.support.rawserver import RawServer, read_message
from tests.support.receiver import Receiver
from webhook_delivery.config import default_blacklist, parse_blacklist
from webhook_delivery.phorge.formats import load_config
from webhook_delivery.phorge.netguard import make_resolver
from webhook_delivery.worker.dispatcher import Dispatcher
from webhook_delivery.worker.loop import build_worker


@PHORGE_DB
def test_default_blacklist_refuses_loopback_without_any_request(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/x/ok")), retry="forever")
        build_worker(dataclasses.replace(delivery_config, outbound_blacklist=default_blacklist()), once=True).run()
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
        assert row["properties"].endswith('"errorType":"hook","errorCode":"uri"}')
        assert receiver.requests == []


@PHORGE_DB
def test_ipv6_loopback_is_refused(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver(host="::1") as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/v6/ok")))
        build_worker(dataclasses.replace(delivery_config, outbound_blacklist=default_blacklist()), once=True).run()
        assert phorge.row(phid)["properties"].endswith('"errorCode":"uri"}')
        assert receiver.requests == []
    with Receiver(host="::1") as receiver:  # and reachable when the operator allows it
        phid = phorge.request(phorge.hook(receiver.url("/v6/ok")))
        build_worker(dataclasses.replace(delivery_config, outbound_blacklist=()), once=True).run()
        assert phorge.row(phid)["status"] == "sent"
        assert receiver.requests[0].header("Host") == f"[::1]:{receiver.port}"


@PHORGE_DB
def test_redirect_into_the_blacklist_is_not_followed(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver(host="127.0.0.2") as inside, Receiver() as outside:
        outside.state.redirect_to = inside.url("/internal/ok")
        phid = phorge.request(phorge.hook(outside.url("/public/away")))
        config = dataclasses.replace(delivery_config, outbound_blacklist=parse_blacklist("127.0.0.2/32"))
        build_worker(config, once=True).run()
        assert [r.path for r in outside.requests] == ["/public/away"]
        assert inside.requests == []
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"]) == ("failed", "none")
        assert row["properties"].endswith('"errorType":"hook","errorCode":"uri"}')


@PHORGE_DB
def test_temporary_dns_failure_is_retryable_http_6(phorge: Phorge, delivery_config: Any) -> None:
    def servfail(*args: Any) -> Any:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    phid = phorge.request(phorge.hook("http://flaky-dns.example/x"), retry="forever")
    dispatcher = Dispatcher(delivery_config, resolver=make_resolver(servfail))
    build_worker(delivery_config, once=True, dispatcher=dispatcher).run()
    row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"]) == ("queued", "fail")
    assert row["properties"].endswith('"errorType":"http","errorCode":6}')


def _properties_error(row: dict[str, Any]) -> tuple[str, int]:
    properties = json.loads(row["properties"])
    return properties["errorType"], properties["errorCode"]


@PHORGE_DB
@pytest.mark.needs_tool("curl", "php")
def test_every_odd_answer_is_written_as_php_would_write_it(
    phorge: Phorge, delivery_config: Any, tmp_path: Path
) -> None:
    """The differential test through the real worker: each odd answer's row holds what PHP would store, the
    throwaway CA trusted as a Phorge administrator trusts a private CA (arcanist's custom.pem)."""
    tls = TlsFiles.make(tmp_path)
    tree = arcanist_tree(tmp_path, custom=tls.ca)
    trust = load_config({"GORGE_WEBHOOK_ARCANIST_ROOT": str(tree)}).delivery.trust
    expected: dict[str, tuple[str, int]] = {}
    requests: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:
        for case in CASES:
            server = stack.enter_context(CaseServer(case, tls))
            urls = [server.url()] * case.requests
            recorded = php_records(
                urls,
                b"{}",
                "0" * 64,
                timeout=delivery_config.delivery_timeout,
                cacert=tree / "resources/ssl/custom.pem",
            )
            expected[case.name] = (recorded[-1].error_type, recorded[-1].error_code)
            hook = phorge.hook(server.url(), name=case.name)
            requests[case.name] = [phorge.request(hook) for _ in range(case.requests)]
        build_worker(dataclasses.replace(delivery_config, outbound_blacklist=(), trust=trust), once=True).run()
    written = {name: _properties_error(phorge.row(phids[-1])) for name, phids in requests.items()}
    assert written == expected


def _shared_receiver(first: bytes, then: bytes, leftover_sent: threading.Event) -> Callable[[socket.socket], None]:
    """One receiver address for two hooks: /fail always answers 500; any other path gets `first` and, a
    moment later, `then`: bytes a client finds on the connection before its next request."""

    def handler(sock: socket.socket) -> None:
        buffer = b""
        while (message := read_message(sock, buffer)) is not None:
            head, _, buffer = message
            if b" /fail " in head:
                sock.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n")
                continue
            sock.sendall(first)
            time.sleep(0.05)
            sock.sendall(then)
            leftover_sent.set()

    return handler


@PHORGE_DB
@pytest.mark.parametrize(
    ("first", "then", "recorded"),
    [
        (b"HTTP/1.1 102 Processing\r\n\r\n", OK, ("http", 102)),  # PHP records the interim status
        (b"HTTP/1.1 204 No Content\r\n\r\n", OK, ("http", 204)),  # a second answer after a 204
        (OK, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", ("http", 200)),  # a second answer after one
    ],
    ids=["interim-102", "after-204", "after-200"],
)
def test_bytes_after_an_answer_never_answer_another_hooks_request(
    phorge: Phorge, delivery_config: Any, first: bytes, then: bytes, recorded: tuple[str, int]
) -> None:
    """Two hooks on one receiver address: one's receiver answers and then sends more, the other's always
    fails. Each row records its own answer: the failing hook never gets the other's leftover 200."""
    config = dataclasses.replace(delivery_config, outbound_blacklist=())
    leftover_sent = threading.Event()
    with RawServer(_shared_receiver(first, then, leftover_sent)) as shared:
        odd_hook = phorge.hook(f"http://127.0.0.1:{shared.port}/odd", name="odd")
        failing_hook = phorge.hook(f"http://127.0.0.1:{shared.port}/fail", name="failing")
        odd_rows, failing_rows = [], []
        for _ in range(3):  # one hook, then the other, each run finding what the last one left
            odd_rows.append(phorge.request(odd_hook))
            build_worker(config, once=True).run()
            assert leftover_sent.wait(5)
            leftover_sent.clear()
            failing_rows.append(phorge.request(failing_hook))
            build_worker(config, once=True).run()
    assert [_properties_error(phorge.row(phid)) for phid in odd_rows] == [recorded] * 3
    assert [_properties_error(phorge.row(phid)) for phid in failing_rows] == [("http", 500)] * 3
    assert {phorge.row(phid)["status"] for phid in failing_rows} == {"failed"}


@PHORGE_DB
def test_a_hooks_connection_never_carries_another_hooks_delivery(phorge: Phorge, delivery_config: Any) -> None:
    """One hook's name resolves to [the victim's address, the attacker's]; the victim's address refuses
    once, so that hook's connection goes to the attacker. No delivery of the victim's own hook (whose name
    resolves to the victim's address only) may ever reach the attacker, and none is `sent` unless the
    victim's receiver answered it."""
    config = dataclasses.replace(delivery_config, outbound_blacklist=())
    with Receiver(host="127.0.0.3") as attacker:
        port = attacker.port
        names = {"other.test": ["127.0.0.2", "127.0.0.3"], "victim.test": ["127.0.0.2"]}

        def lookup(host: str, lookup_port: int, *args: Any) -> list[Any]:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, lookup_port)) for address in names[host]]

        dispatcher = Dispatcher(config, resolver=make_resolver(lookup))
        other = phorge.hook(f"http://other.test:{port}/other/ok", name="other")
        victim = phorge.hook(f"http://victim.test:{port}/victim/ok", name="victim")
        first = phorge.request(other)
        build_worker(config, once=True, dispatcher=dispatcher).run()  # 127.0.0.2 refuses: to the attacker
        assert [r.path for r in attacker.requests] == ["/other/ok"] and phorge.row(first)["status"] == "sent"
        with Receiver(host="127.0.0.2", port=port) as real:
            rows = []
            for _ in range(5):
                rows.append(phorge.request(victim))
                phorge.request(other)
                build_worker(config, once=True, dispatcher=dispatcher).run()
        assert not [r.path for r in attacker.requests if r.path.startswith("/victim")]
        assert [r.path for r in real.requests if r.path.startswith("/victim")] == ["/victim/ok"] * 5
        assert {phorge.row(phid)["status"] for phid in rows} == {"sent"}


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    offenders = [r.getMessage() for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert offenders == []


@PHORGE_DB
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


@PHORGE_DB
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
