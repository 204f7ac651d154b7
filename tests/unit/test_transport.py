"""SSRF protection end to end, and every transport failure recorded the way PHP's libcurl records it.

Here: what needs no database and no server process; the rest is in tests/db/test_transport.py."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import subprocess
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.rawserver import RawServer, read_request
from tests.support.receiver import Receiver
from webhook_delivery.config import default_blacklist
from webhook_delivery.phorge.netguard import InvalidURI, make_resolver, system_resolver
from webhook_delivery.worker import curl, transport


def attempt(uri: str, *, timeout: float = 2.0, blacklist: Any = (), resolver: Any = system_resolver) -> Any:
    deadline = transport.Deadline.after(timeout)
    hop = transport.check_uri(uri, blacklist, resolver, deadline)
    return transport.post(
        uri, b'{"x": 1}\n', "0" * 64, owner="PHID-HOOK-test", first_hop=hop, blacklist=blacklist, deadline=deadline
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
def test_invalid_uris_are_permanent_uri_failures(uri: str) -> None:
    with pytest.raises(InvalidURI):
        attempt(uri)


def test_every_resolved_address_is_checked() -> None:
    def two_addresses(host: str, port: int, *args: Any) -> list[Any]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::1", port, 0, 0)),
        ]

    with pytest.raises(InvalidURI):
        attempt("http://dual.example/x", blacklist=default_blacklist(), resolver=make_resolver(two_addresses))


def test_connection_goes_to_the_checked_address() -> None:
    """No second lookup: whatever the name resolves to later, we connect where we checked."""
    answers = iter(["127.0.0.1", "127.0.0.9"])

    def rebinding(host: str, port: int, *args: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    with Receiver() as receiver:
        result = attempt(f"http://rebind.example:{receiver.port}/a/ok", resolver=make_resolver(rebinding))
        assert result == outcome(200)
        assert receiver.requests[0].header("Host") == f"rebind.example:{receiver.port}"


def _respond(head: bytes, *, then: Any = None) -> Any:
    def handler(sock: socket.socket) -> None:
        read_request(sock)
        sock.sendall(head)
        if then:
            then(sock)

    return handler


def test_refused_is_http_7() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    assert attempt(f"http://127.0.0.1:{port}/x") == outcome(7)


def test_a_2xx_whose_body_trickles_past_the_deadline_is_a_timeout() -> None:
    def trickle(sock: socket.socket) -> None:
        for _ in range(100):
            sock.sendall(b"x")
            time.sleep(0.1)

    with RawServer(_respond(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", then=trickle)) as server:
        started = time.monotonic()
        assert attempt(f"http://127.0.0.1:{server.port}/x", timeout=1.0) == outcome(28, "timeout")
        assert time.monotonic() - started < 1.5


def test_headers_trickled_forever_cannot_hold_a_worker_past_the_deadline() -> None:
    def trickle(sock: socket.socket) -> None:
        for _ in range(200):
            sock.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.05)

    with RawServer(_respond(b"HTTP/1.1 200 OK\r\n", then=trickle)) as server:
        started = time.monotonic()
        assert attempt(f"http://127.0.0.1:{server.port}/x", timeout=1.0) == outcome(28, "timeout")
        assert time.monotonic() - started < 1.5


def test_an_endless_compressed_body_keeps_memory_bounded() -> None:
    chunk = b"\x1f\x8b" + b"\x00" * 65534

    def flood(sock: socket.socket) -> None:
        while True:
            sock.sendall(chunk)

    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: identity\r\n\r\n"
    with RawServer(_respond(head, then=flood)) as server:
        tracemalloc.start()
        try:
            assert attempt(f"http://127.0.0.1:{server.port}/x", timeout=1.0) == outcome(28, "timeout")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * 1024 * 1024


def test_a_large_body_that_ends_in_time_is_drained_and_counts() -> None:
    body = b"y" * (8 * 1024 * 1024)
    head = b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n" % len(body)
    with RawServer(_respond(head + body)) as server:
        assert attempt(f"http://127.0.0.1:{server.port}/x", timeout=5.0) == outcome(201)


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (b"", 52),  # empty reply
        (b"SSH-2.0-OpenSSH\r\n\r\n", 1),  # not HTTP
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", 18),  # partial body
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 404),
        (b"HTTP/1.1 300 Multiple Choices\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n", 300),
        (b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n", 302),  # no Location: final
    ],
)
def test_response_shapes(answer: bytes, code: int) -> None:
    with RawServer(_respond(answer)) as server:
        assert attempt(f"http://127.0.0.1:{server.port}/x") == outcome(code)


def test_reset_by_peer_is_http_56() -> None:
    def reset(sock: socket.socket) -> None:
        read_request(sock)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        time.sleep(0.1)

    with RawServer(reset) as server:
        assert attempt(f"http://127.0.0.1:{server.port}/x") in (outcome(56), outcome(18))


def test_too_many_redirects_is_http_47() -> None:
    with Receiver() as receiver:
        assert attempt(receiver.url("/r/loop")) == outcome(47)
        assert len(receiver.requests) == 21


def test_redirects_follow_curl_method_rules() -> None:
    with Receiver() as receiver:
        assert attempt(receiver.url("/a/r303")) == outcome(200)
        assert attempt(receiver.url("/b/r307")) == outcome(200)
    first, after_303, second, after_307 = receiver.requests
    assert first.body == b'{"x": 1}\n' and after_303.method == "POST" and after_303.body == b""
    assert after_303.header("Content-Type") == "application/json"
    assert after_303.header("X-Phabricator-Webhook-Signature") == "0" * 64
    assert after_307.method == "POST" and after_307.body == second.body


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    yield cert, key


def _tls_server(cert: Path, key: Path) -> RawServer:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def wrap(sock: socket.socket) -> socket.socket:
        return context.wrap_socket(sock, server_side=True)

    def answer(sock: socket.socket) -> None:
        read_request(sock)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    return RawServer(answer, wrap=wrap)


def test_tls_is_verified_by_host_name_on_the_pinned_address(
    tls_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tls_files
    with _tls_server(cert, key) as server:
        assert attempt(f"https://localhost:{server.port}/x") == outcome(60)  # unknown issuer
        monkeypatch.setattr(curl, "CA_FILE", str(cert))
        assert attempt(f"https://localhost:{server.port}/x") == outcome(200)
        assert attempt(f"https://127.0.0.1:{server.port}/x") == outcome(60)  # name mismatch


def test_tls_handshake_failure_is_http_35() -> None:
    def not_tls(sock: socket.socket) -> None:
        sock.recv(1024)
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    with RawServer(not_tls) as server:
        assert attempt(f"https://127.0.0.1:{server.port}/x") == outcome(35)


def test_connect_timeout_is_a_timeout() -> None:
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
        result = attempt(f"http://127.0.0.1:{port}/x", timeout=1.0)
        assert result in (outcome(28, "timeout"), outcome(52))
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_ipaddress_literal_never_touches_the_resolver() -> None:
    def no_dns(*args: Any) -> Any:
        raise AssertionError("resolver called for an IP literal")

    with Receiver() as receiver:
        assert attempt(receiver.url("/lit/ok"), resolver=make_resolver(no_dns)) == outcome(200)
    assert ipaddress.ip_address("127.0.0.1")
