"""The delivery path's own HTTP/1.1 (worker/http1.py) against real sockets: answers read by http.client's
rules, so every failure keeps its libcurl number, keep-alive connections reused and replaced, and the
request target encoded as before (urllib3's rules)."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from urllib3.util.url import _encode_target

from tests.support.rawserver import RawServer, read_message, read_request
from webhook_delivery.phorge.netguard import encode_target, system_resolver
from webhook_delivery.worker import transport

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
FOLDED = b"HTTP/1.1 307 Temporary\r\nLocation:\r\n /y\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def attempt(port: int, path: str = "/x", keep: int = 0) -> transport.HttpOutcome:
    uri = f"http://127.0.0.1:{port}{path}"
    deadline = transport.Deadline.after(2.0)
    hop = transport.check_uri(uri, (), system_resolver, deadline)
    return transport.post(
        uri, b"{}", "0" * 64, first_hop=hop, blacklist=(), resolver=system_resolver, deadline=deadline, keep_body=keep
    )


def answering(answer: bytes) -> RawServer:
    def handler(sock: socket.socket) -> None:
        read_request(sock)
        sock.sendall(answer)

    return RawServer(handler)


@pytest.mark.parametrize(
    ("answer", "code", "size"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
            200,
            5,
        ),
        (CHUNKED + b"zz\r\nabc\r\n0\r\n\r\n", 18, None),
        (CHUNKED + b"10\r\nabc", 18, None),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", 201, 0),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 100 + b"\r\n", 1, None),  # 101 header lines
        (b"HTTP/1.1 200 " + b"x" * 70000 + b"\r\n\r\n", 1, None),  # a status line beyond 65,536 bytes
        (b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n", 1, None),
        (b"HTTP/1.1 2000 Big\r\n\r\n", 1, None),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", 56, None),
        (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", 200, 13),  # no length: read until the server closes
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", 204, 0),
        # A line that is no field ends the fields, as in http.client: the Location after it is not seen.
        (b"HTTP/1.1 302 Found\r\nnot a field\r\nLocation: /y\r\nContent-Length: 0\r\n\r\n", 302, 0),
    ],
)
def test_answers_are_read_by_http_client_rules(answer: bytes, code: int, size: int | None) -> None:
    with answering(answer) as server:
        result = attempt(server.port)
    assert result == transport.HttpOutcome("http", code)
    if size is not None:
        assert result.response_bytes == size


def test_a_folded_location_is_followed() -> None:
    def handler(sock: socket.socket) -> None:
        head = read_message(sock)
        assert head is not None
        if head[0].startswith(b"POST /x "):
            sock.sendall(
                b"HTTP/1.1 307 Temporary\r\nLocation:\r\n /y\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
        else:
            sock.sendall(OK)

    with RawServer(handler) as server:
        assert attempt(server.port) == transport.HttpOutcome("http", 200)
        assert server.connections == 2


def test_the_first_bytes_of_a_body_are_kept_when_asked() -> None:
    with answering(b"HTTP/1.1 500 Oops\r\nContent-Length: 11\r\n\r\nhello world") as server:
        result = attempt(server.port, keep=5)
    assert (result.error_code, result.body_prefix, result.response_bytes) == (500, b"hello", 11)


def keep_alive(answers: int, *, then_close: bool = False) -> RawServer:
    """Answers `answers` requests on each connection, then closes it (at once, with no word, if `then_close`)."""

    def handler(sock: socket.socket) -> None:
        buffer = b""
        for _ in range(answers):
            message = read_message(sock, buffer)
            if message is None:
                return
            buffer = message[2]
            sock.sendall(OK)
        if not then_close:
            read_message(sock, buffer)

    return RawServer(handler)


def test_a_receivers_connection_is_kept_alive_and_reused() -> None:
    with keep_alive(5) as server:
        for _ in range(5):
            assert attempt(server.port) == transport.HttpOutcome("http", 200)
        assert server.connections == 1


def test_a_kept_connection_the_server_closed_is_replaced_before_any_answer() -> None:
    # The server closes each connection right after its one answer, without Connection: close: the next
    # attempt finds the closed connection (used again at once, it is not asked first) and starts afresh.
    with keep_alive(1, then_close=True) as server:
        for _ in range(3):
            assert attempt(server.port) == transport.HttpOutcome("http", 200)
        assert server.connections == 3


def test_a_kept_connection_that_fails_after_an_answer_began_is_not_tried_again() -> None:
    served = threading.Event()

    def handler(sock: socket.socket) -> None:
        read_request(sock)
        sock.sendall(OK)
        read_request(sock)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\npart")
        served.set()

    with RawServer(handler) as server:
        assert attempt(server.port) == transport.HttpOutcome("http", 200)
        assert attempt(server.port) == transport.HttpOutcome("http", 18)
        assert served.is_set() and server.connections == 1


@pytest.mark.parametrize(
    ("target", "wire"),
    [
        ("/a b", "/a%20b"),
        ("/x?y z&ä=ö", "/x?y%20z&%C3%A4=%C3%B6"),
        ("/%2f%41", "/%2F%41"),  # escapes kept, upper-cased
        ("/50%", "/50%25"),  # a % that starts no escape
        ("/50%/%41", "/50%25/%2541"),  # one such %: every % is taken literally
        ("/p?q?r", "/p?q?r"),
        ("/ok/:@!$&'()*+,;=~", "/ok/:@!$&'()*+,;=~"),
    ],
)
def test_the_request_target_is_encoded_as_before(target: str, wire: str) -> None:
    assert encode_target(target) == wire


@given(st.text(alphabet=st.sampled_from('ab %2Ff#?/=ä\x7f\x00:@[]{}|\\^`"<>\u2603'), max_size=12))
def test_the_request_target_encoding_is_urllib3s(text: str) -> None:
    assert encode_target("/" + text) == _encode_target("/" + text)


def test_what_the_receiver_gets_is_encoded() -> None:
    seen: list[bytes] = []

    def handler(sock: socket.socket) -> None:
        seen.append(read_request(sock).split(b"\r\n", 1)[0])
        sock.sendall(OK)

    with RawServer(handler) as server:
        assert attempt(server.port, "/a b?c=ü") == transport.HttpOutcome("http", 200)
    assert seen == [b"POST /a%20b?c=%C3%BC HTTP/1.1"]
