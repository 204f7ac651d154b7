"""SSRF protection end to end, and every transport failure recorded the way PHP's libcurl records it.

Here: what needs no database and no server process; the rest is in tests/db/test_transport.py."""

from __future__ import annotations

import ipaddress
import socket
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.support.arcanist import MOZILLA_ROOTS, arcanist_tree, bundle_in_force
from tests.support.curl_oracle import php_records
from tests.support.odd_answers import CASES, OK, Case, CaseServer, Redirects, TlsFiles
from tests.support.rawserver import RawServer, read_request
from tests.support.receiver import Receiver
from webhook_delivery.config import Trust, default_blacklist, parse_blacklist
from webhook_delivery.phorge.cabundle import CaBundle, CaBundleFile
from webhook_delivery.phorge.netguard import InvalidURI, make_resolver, system_resolver
from webhook_delivery.worker import transport
from webhook_delivery.worker.curl import Handles

SYSTEM_STORE = CaBundle(None, "variable", "GORGE_WEBHOOK_CA_BUNDLE=system")


@pytest.fixture
def handles() -> Iterator[Handles]:
    """The hooks' libcurl handles, as a worker's dispatcher owns them: this test's own, closed after it."""
    with closing(Handles()) as own:
        yield own


def attempt(
    handles: Handles,
    uri: str,
    *,
    timeout: float = 2.0,
    blacklist: Any = (),
    resolver: Any = system_resolver,
    ca: Any = SYSTEM_STORE,
    owner: str = "PHID-HOOK-test",
) -> Any:
    deadline = transport.Deadline.after(timeout)
    hop = transport.check_uri(uri, blacklist, resolver, deadline)
    return transport.post(
        uri,
        b'{"x": 1}\n',
        "0" * 64,
        handles=handles,
        owner=owner,
        first_hop=hop,
        blacklist=blacklist,
        deadline=deadline,
        ca=ca,
    )


def outcome(code: Any, kind: str = "http") -> transport.HttpOutcome:
    return transport.HttpOutcome(kind, code)


@pytest.mark.parametrize(
    "uri",
    [
        "ftp://127.0.0.1/x",
        "HTTPS://127.0.0.1/x",
        " http://127.0.0.1/x",
        "http:///x",
        "http://bad_host/x",
        "http://a.b?c:d@127.0.0.1/x",
        "http://nonexistent.invalid/x",
        "http://127.0.0.1:0/x",
    ],
)
def test_invalid_uris_are_permanent_uri_failures(handles: Handles, uri: str) -> None:
    with pytest.raises(InvalidURI):
        attempt(handles, uri)


def test_every_resolved_address_is_checked(handles: Handles) -> None:
    def two_addresses(host: str, port: int, *args: Any) -> list[Any]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::1", port, 0, 0)),
        ]

    with pytest.raises(InvalidURI):
        attempt(handles, "http://dual.example/x", blacklist=default_blacklist(), resolver=make_resolver(two_addresses))


def test_connection_goes_to_the_checked_address(handles: Handles) -> None:
    """No second lookup: whatever the name resolves to later, we connect where we checked."""
    answers = iter(["127.0.0.1", "127.0.0.9"])

    def rebinding(host: str, port: int, *args: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    with Receiver() as receiver:
        result = attempt(handles, f"http://rebind.example:{receiver.port}/a/ok", resolver=make_resolver(rebinding))
        assert result == outcome(200)
        assert receiver.requests[0].header("Host") == f"rebind.example:{receiver.port}"


def test_a_hooks_pin_holds_until_its_addresses_change_and_then_a_fresh_connection_is_made(handles: Handles) -> None:
    """The name exists nowhere but in the resolver stand-in: each delivery reaches the address it checked,
    on the kept connection while the addresses stay, on a new one to the new address when they change."""
    where = {"address": "127.0.0.1"}

    def lookup(host: str, port: int, *args: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (where["address"], port))]

    resolver = make_resolver(lookup)
    with Receiver() as first:
        with Receiver(host="127.0.0.2", port=first.port) as second:
            url = f"http://pinned.invalid:{first.port}/pin/ok"

            def deliver() -> Any:
                return attempt(handles, url, resolver=resolver, owner="PHID-HOOK-pin")

            assert [deliver() for _ in range(3)] == [outcome(200)] * 3
            where["address"] = "127.0.0.2"
            assert [deliver() for _ in range(2)] == [outcome(200)] * 2
    assert (len(first.requests), len(second.requests)) == (3, 2)


def _respond(head: bytes, *, then: Any = None) -> Any:
    def handler(sock: socket.socket) -> None:
        read_request(sock)
        sock.sendall(head)
        if then:
            then(sock)

    return handler


def test_refused_is_http_7(handles: Handles) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    assert attempt(handles, f"http://127.0.0.1:{port}/x") == outcome(7)


def test_a_2xx_whose_body_trickles_past_the_deadline_is_a_timeout(handles: Handles) -> None:
    def trickle(sock: socket.socket) -> None:
        for _ in range(100):
            sock.sendall(b"x")
            time.sleep(0.1)

    with RawServer(_respond(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", then=trickle)) as server:
        started = time.monotonic()
        assert attempt(handles, f"http://127.0.0.1:{server.port}/x", timeout=1.0) == outcome(28, "timeout")
        assert time.monotonic() - started < 1.5


def test_headers_trickled_forever_cannot_hold_a_worker_past_the_deadline(handles: Handles) -> None:
    def trickle(sock: socket.socket) -> None:
        for _ in range(200):
            sock.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.05)

    with RawServer(_respond(b"HTTP/1.1 200 OK\r\n", then=trickle)) as server:
        started = time.monotonic()
        assert attempt(handles, f"http://127.0.0.1:{server.port}/x", timeout=1.0) == outcome(28, "timeout")
        assert time.monotonic() - started < 1.5


def test_an_endless_compressed_body_keeps_memory_bounded(handles: Handles) -> None:
    chunk = b"\x1f\x8b" + b"\x00" * 65534

    def flood(sock: socket.socket) -> None:
        while True:
            sock.sendall(chunk)

    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: identity\r\n\r\n"
    with RawServer(_respond(head, then=flood)) as server:
        tracemalloc.start()
        try:
            assert attempt(handles, f"http://127.0.0.1:{server.port}/x", timeout=1.0) == outcome(28, "timeout")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * 1024 * 1024


def test_a_large_body_that_ends_in_time_is_drained_and_counts(handles: Handles) -> None:
    body = b"y" * (8 * 1024 * 1024)
    head = b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n" % len(body)
    with RawServer(_respond(head + body)) as server:
        assert attempt(handles, f"http://127.0.0.1:{server.port}/x", timeout=5.0) == outcome(201)


def test_reset_by_peer_is_http_56(handles: Handles) -> None:
    def reset(sock: socket.socket) -> None:
        read_request(sock)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        time.sleep(0.1)

    with RawServer(reset) as server:
        assert attempt(handles, f"http://127.0.0.1:{server.port}/x") in (outcome(56), outcome(18))


def test_too_many_redirects_is_http_47(handles: Handles) -> None:
    with Receiver() as receiver:
        assert attempt(handles, receiver.url("/r/loop")) == outcome(47)
        assert len(receiver.requests) == 21


def test_redirects_follow_curl_method_rules(handles: Handles) -> None:
    with Receiver() as receiver:
        assert attempt(handles, receiver.url("/a/r303")) == outcome(200)
        assert attempt(handles, receiver.url("/b/r307")) == outcome(200)
    first, after_303, second, after_307 = receiver.requests
    assert first.body == b'{"x": 1}\n' and after_303.method == "POST" and after_303.body == b""
    assert after_303.header("Content-Type") == "application/json"
    assert after_303.header("X-Phabricator-Webhook-Signature") == "0" * 64
    assert after_307.method == "POST" and after_307.body == second.body


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return TlsFiles.make(tmp_path_factory.mktemp("tls"))


def test_tls_is_verified_by_host_name_on_the_pinned_address(handles: Handles, tls: TlsFiles, tmp_path: Path) -> None:
    trusted = bundle_in_force(GORGE_WEBHOOK_CA_BUNDLE=str(tls.ca))
    with CaseServer(Case("tls", (OK,) * 3, tls="ok"), tls) as server:
        assert attempt(handles, server.url("localhost")) == outcome(60)  # unknown issuer
        assert attempt(handles, server.url("localhost"), ca=trusted) == outcome(200)
    with RawServer(_respond(OK), host="127.0.0.2", wrap=tls.wrapper("ok")) as server:
        assert attempt(handles, f"https://127.0.0.2:{server.port}/x") == outcome(60)  # not a name the certificate has


def test_a_changed_bundle_leaves_no_connection_verified_under_the_old_one(
    handles: Handles, tls: TlsFiles, tmp_path: Path
) -> None:
    """The hook's kept TLS connection was verified against custom.pem; once custom.pem no longer trusts the
    receiver's CA, the next delivery is verified again, on a new connection, and fails as PHP's would."""
    tree = arcanist_tree(tmp_path, custom=tls.ca)
    custom = tree / "resources" / "ssl" / "custom.pem"
    now = [0.0]
    watched = CaBundleFile(Trust(arcanist=str(tree), arcanist_from="GORGE_WEBHOOK_ARCANIST_ROOT"), clock=lambda: now[0])
    with CaseServer(Case("kept", (OK,) * 10, tls="ok"), tls) as server:
        url = server.url("localhost")
        assert [attempt(handles, url, ca=watched.current()) for _ in range(2)] == [outcome(200)] * 2
        assert server.server.connections == 1
        custom.write_bytes(MOZILLA_ROOTS.read_bytes())
        now[0] += 1.0
        assert attempt(handles, url, ca=watched.current()) == outcome(60)
        custom.write_bytes(tls.ca.read_bytes())
        now[0] += 1.0
        assert attempt(handles, url, ca=watched.current()) == outcome(200)
        assert server.server.connections == 3


def test_tls_handshake_failure_is_http_35(handles: Handles) -> None:
    def not_tls(sock: socket.socket) -> None:
        sock.recv(1024)
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    with RawServer(not_tls) as server:
        assert attempt(handles, f"https://127.0.0.1:{server.port}/x") == outcome(35)


def test_connect_timeout_is_a_timeout(handles: Handles) -> None:
    # A listener with a full backlog and no accept(): connecting hangs until the deadline.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    port = listener.getsockname()[1]
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    try:
        result = attempt(handles, f"http://127.0.0.1:{port}/x", timeout=1.0)
        assert result in (outcome(28, "timeout"), outcome(52))
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_ipaddress_literal_never_touches_the_resolver(handles: Handles) -> None:
    def no_dns(*args: Any) -> Any:
        raise AssertionError("resolver called for an IP literal")

    with Receiver() as receiver:
        assert attempt(handles, receiver.url("/lit/ok"), resolver=make_resolver(no_dns)) == outcome(200)
    assert ipaddress.ip_address("127.0.0.1")


# The differential tests: each odd answer served to the real curl with HTTPSFuture's options (PHP's libcurl)
# and to the delivery path; what PHP records of it (curl's error, or Phorge's parse of curl's raw buffer) is
# what the delivery path must record.

BODY, SIGNATURE = b'{"x": 1}\n', "5" * 64


def deliver(
    handles: Handles, urls: list[str], owner: str, *, timeout: float = 3.0, ca: CaBundle = SYSTEM_STORE
) -> list[tuple[str, int]]:
    """Each URL in turn on the hook `owner`'s connections, as the worker delivers a hook's rows."""
    results = []
    for url in urls:
        deadline = transport.Deadline.after(timeout)
        hop = transport.check_uri(url, (), system_resolver, deadline)
        http = transport.post(
            url, BODY, SIGNATURE, handles=handles, owner=owner, first_hop=hop, blacklist=(), deadline=deadline, ca=ca
        )
        results.append((http.error_type, http.error_code))
    return results


def php(urls: list[str], ca: CaBundle, *, timeout: float = 3.0) -> list[tuple[str, int]]:
    """What PHP records: the real curl given the bundle as HTTPSFuture gives it to libcurl (`--cacert`)."""
    cacert = None if ca.path is None else Path(ca.path)
    return [(r.error_type, r.error_code) for r in php_records(urls, BODY, SIGNATURE, timeout=timeout, cacert=cacert)]


@pytest.fixture(scope="module")
def custom_pem(tls: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> CaBundle:
    """The throwaway CA as a Phorge administrator trusts a private CA: arcanist's custom.pem."""
    tree = arcanist_tree(tmp_path_factory.mktemp("phorge"), custom=tls.ca)
    bundle = bundle_in_force(GORGE_WEBHOOK_ARCANIST_ROOT=str(tree))
    assert bundle.path == str(tree / "resources" / "ssl" / "custom.pem")
    return bundle


@pytest.mark.needs_tool("curl", "php")
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_odd_answer_is_recorded_as_php_records_it(
    handles: Handles, case: Case, tls: TlsFiles, custom_pem: CaBundle
) -> None:
    with CaseServer(case, tls) as server:
        urls = [server.url()] * case.requests
        expected = php(urls, custom_pem)[-1]
        if case.recorded is not None:  # the oracle gives what was measured with PHP's libcurl
            assert expected == case.recorded
        assert deliver(handles, urls, f"PHID-HOOK-{case.name}", ca=custom_pem)[-1] == expected


# Each TLS case with the CA not trusted; with it trusted, the handshake that completes (every TLS case with it
# trusted is in the test above; tls-client-cert's refusal races the request, so it is run once there).
TLS_GIVEN = [
    *((given, case) for given in ("custom.pem", "GORGE_WEBHOOK_CA_BUNDLE") for case in CASES if case.tls == "ok"),
    *((given, case) for given in ("neither", "no default.pem") for case in CASES if case.tls),
]


@pytest.mark.needs_tool("curl", "php")
@pytest.mark.parametrize(("given", "case"), TLS_GIVEN, ids=[f"{given}-{case.name}" for given, case in TLS_GIVEN])
def test_the_tls_cases_are_recorded_as_php_records_them_with_the_bundle_php_uses(
    handles: Handles, case: Case, given: str, tls: TlsFiles, tmp_path: Path
) -> None:
    """The CA given as an administrator gives it, or not at all: with arcanist's default.pem alone, PHP records
    an unknown issuer (http/60); without default.pem (a packaging without it) libcurl's own store, the
    system's, which does not know the throwaway CA either."""
    tree = arcanist_tree(tmp_path, custom=tls.ca if given == "custom.pem" else None, default=given != "no default.pem")
    env = {"GORGE_WEBHOOK_ARCANIST_ROOT": str(tree)}
    if given == "GORGE_WEBHOOK_CA_BUNDLE":
        env["GORGE_WEBHOOK_CA_BUNDLE"] = str(tls.ca)
    bundle = bundle_in_force(**env)
    assert (
        bundle.path
        == {
            "custom.pem": str(tree / "resources/ssl/custom.pem"),
            "GORGE_WEBHOOK_CA_BUNDLE": str(tls.ca),
            "neither": str(tree / "resources/ssl/default.pem"),
            "no default.pem": None,
        }[given]
    )
    with CaseServer(case, tls) as server:
        urls = [server.url()] * case.requests
        expected = php(urls, bundle)[-1]
        if given in ("neither", "no default.pem") and case.name != "tls-reset":  # reset before any certificate
            assert expected == ("http", 60)
        elif case.recorded is not None:
            assert expected == case.recorded
        assert deliver(handles, urls, f"PHID-HOOK-{given}-{case.name}", ca=bundle)[-1] == expected


def _fields(head: bytes) -> list[bytes]:
    return head.split(b"\r\n")


@pytest.mark.needs_tool("curl", "php")
@pytest.mark.parametrize("path", ["/r300", "/r301", "/r302", "/r303", "/r304", "/r305", "/r307", "/r308", "/loop"])
def test_redirects_are_followed_as_libcurl_follows_them_byte_for_byte(
    handles: Handles, path: str, tls: TlsFiles
) -> None:
    with Redirects() as server:
        expected = php([server.url(path)], SYSTEM_STORE)
        by_curl = len(server.heads)
        assert deliver(handles, [server.url(path)], "PHID-HOOK-redirects") == expected
    assert [_fields(head) for head in server.heads[by_curl:]] == [_fields(head) for head in server.heads[:by_curl]]
    assert server.bodies[by_curl:] == server.bodies[:by_curl]
    if path in ("/r301", "/r302", "/r303"):  # the follow-up: POST, no body and no Content-Length at all
        follow_up = _fields(server.heads[-1])
        assert follow_up[0].startswith(b"POST /final ")
        assert not [field for field in follow_up if field.lower().startswith(b"content-length")]


def test_a_kept_connection_serves_only_under_the_blacklist_it_was_checked_against(handles: Handles) -> None:
    """A hook's redirect target, reached and kept while allowed, then put on the outbound blacklist: the
    next delivery does not use the kept connection, it connects afresh and is refused."""
    with Receiver(host="127.0.0.2") as target, Receiver() as hook:
        hook.state.redirect_to = target.url("/target/ok")
        url = hook.url("/hook/away")

        def deliver(blacklist: Any) -> Any:
            return attempt(handles, url, blacklist=blacklist, owner="PHID-HOOK-moved")

        assert [deliver(()) for _ in range(2)] == [outcome(200)] * 2
        with pytest.raises(InvalidURI):
            deliver(parse_blacklist("127.0.0.2/32"))
    assert [r.path for r in target.requests] == ["/target/ok"] * 2


def test_a_large_request_body_is_let_go_after_its_transfer(handles: Handles) -> None:
    """pycurl keeps the body it was given until the next one: a hook's handle must not hold a request of
    megabytes (a request with thousands of transactions) between deliveries."""
    body = b'{"transactions": "' + b"x" * 1_000_000 + b'"}'
    with RawServer(_respond(OK)) as server:
        url = f"http://127.0.0.1:{server.port}/big"
        deadline = transport.Deadline.after(2.0)
        hop = transport.check_uri(url, (), system_resolver, deadline)
        references = sys.getrefcount(body)
        http = transport.post(
            url,
            body,
            "0" * 64,
            handles=handles,
            owner="PHID-HOOK-big",
            first_hop=hop,
            blacklist=(),
            deadline=deadline,
            ca=SYSTEM_STORE,
        )
        assert http == outcome(200)
        assert sys.getrefcount(body) == references
