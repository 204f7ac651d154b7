"""What one attempt may cost the worker (worker/curl.py): a gzip body is inflated within a budget of bytes and
CPU time, and a kept handle lets its last answer go. What PHP records of the same answers is in the module's
docstring (arcanist's HTTPSFuture with php8.2-curl: an endless gzip body is timeout / 28, a whole member of
1 GiB is its status, a member cut short is http / 1). And what a 429 or 503 answer's Retry-After asks for, read
and kept per hook for the scheduler (GORGE_WEBHOOK_HONOR_RETRY_AFTER)."""

from __future__ import annotations

import email.utils
import socket
import time
import zlib
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.rawserver import RawServer, read_request
from webhook_delivery.phorge.cabundle import CaBundle
from webhook_delivery.phorge.netguard import system_resolver
from webhook_delivery.worker import curl

ZEROS = 1 << 24  # each block below inflates to 16 MiB


def _gzip_blocks() -> tuple[bytes, bytes]:
    """A gzip header with its first block, and a block that may follow it any number of times (each 16 MiB of
    zeros, about 16 KB on the wire): a member that never ends."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = z.compress(b"\0" * ZEROS) + z.flush(zlib.Z_SYNC_FLUSH)
    again = z.compress(b"\0" * ZEROS) + z.flush(zlib.Z_SYNC_FLUSH)
    return first, again


SYSTEM_STORE = CaBundle(None, "variable", "GORGE_WEBHOOK_CA_BUNDLE=system")
FIRST, AGAIN = _gzip_blocks()
GZIP_HEAD = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nConnection: close\r\n"


def exchange(handles: curl.Handles, port: int, owner: str = "PHID-HWBH-cost", *, timeout_ms: int) -> curl.Exchange:
    return handles.exchange(
        owner,
        url=f"http://127.0.0.1:{port}/x".encode(),
        pin=None,
        proxy_addresses=(),
        body=b"{}",
        headers=["Content-Type: application/json"],
        timeout_ms=timeout_ms,
        blacklist=(),
        ca=SYSTEM_STORE,
        proxy=None,
        resolver=system_resolver,
    )


def test_an_endless_gzip_body_costs_the_budgets_cpu_not_the_deadlines() -> None:
    sent = [0]

    def endless_gzip(sock: socket.socket) -> None:
        """200, gzip, a member that never ends: 200 blocks a second, 3 GB a second once inflated, far more
        than a core inflates."""
        read_request(sock)
        sock.sendall(GZIP_HEAD + b"\r\n" + FIRST)
        while True:
            sock.sendall(AGAIN)
            sent[0] += ZEROS
            time.sleep(0.005)

    with RawServer(endless_gzip) as server, closing(curl.Handles()) as handles:
        started = time.thread_time()  # this thread's CPU time: libcurl and its callbacks run here
        answer = exchange(handles, server.port, timeout_ms=3000)
        spent = time.thread_time() - started
    assert answer.error == 28, "ended by the deadline, as libcurl ends PHP's: timeout / 28"
    assert sent[0] > 10 * curl.GZIP_OUTPUT_MAX, "far more was sent than the budget inflates"
    assert spent < curl.GZIP_CPU_MAX_SEC + 0.5, f"{spent:.2f} s of CPU in a 3 s attempt"


def test_a_whole_member_past_the_budget_has_its_status_recorded_and_one_cut_short_in_it_is_malformed() -> None:
    past = zlib.compress(b"\0" * (2 * curl.GZIP_OUTPUT_MAX), 9, 31)  # PHP: 200 (gzdecode inflates it whole)
    cut = FIRST[: len(FIRST) // 2]  # ends within the budget, the member unfinished: PHP's gzdecode() fails

    def answer(body: bytes) -> bytes:
        return GZIP_HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body

    for body, status in ((past, 200), (cut, None)):
        with RawServer(lambda sock, body=body: (read_request(sock), sock.sendall(answer(body)))) as server:
            with closing(curl.Handles()) as handles:
                started = time.thread_time()
                got = exchange(handles, server.port, timeout_ms=5000)
                spent = time.thread_time() - started
        assert (got.error, got.status) == (0, status)
        assert spent < curl.GZIP_CPU_MAX_SEC + 0.5


def answer_with_headers(size: int) -> Callable[[socket.socket], None]:
    """Each request on a connection answered 204 with `size` bytes of header lines, the connection kept."""
    lines = b"".join(b"X-Filler-%03d: %s\r\n" % (n, b"f" * 986) for n in range(size // 1000))

    def answer(sock: socket.socket) -> None:
        while read_request(sock):
            sock.sendall(b"HTTP/1.1 204 No Content\r\n" + lines + b"\r\n")

    return answer


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def test_huge_headers_on_128_hooks_leave_the_memory_as_it_was() -> None:
    """libcurl keeps an answer's headers in its handle until the next transfer (about 2.5 times their size):
    290 KiB of headers on each of 128 kept handles held 88 MiB."""
    hooks = [f"PHID-HWBH-{n:04d}" for n in range(curl.IDLE_HANDLES)]
    with RawServer(answer_with_headers(290 * 1024)) as server, closing(curl.Handles()) as handles:
        for hook in hooks[:8]:  # the allocator's first arenas, and the code's first run
            assert exchange(handles, server.port, hook, timeout_ms=5000).status == 204
        before = rss()
        for hook in hooks:
            assert exchange(handles, server.port, hook, timeout_ms=5000).status == 204
        grown = rss() - before
        assert not handles._idle, "a handle whose last answer had huge headers is closed, not kept"
        assert exchange(handles, server.port, hooks[0], timeout_ms=5000).status == 204, "its next call: a new one"
    assert grown < 8 * 1024 * 1024, f"RSS grew by {grown >> 20} MiB over {len(hooks)} hooks"


def test_a_hook_with_ordinary_headers_keeps_its_handle_and_connection_but_not_its_last_answer() -> None:
    with RawServer(answer_with_headers(4 * 1024)) as server, closing(curl.Handles()) as handles:
        for _ in range(3):
            assert exchange(handles, server.port, timeout_ms=5000).status == 204
        (kept,) = handles._idle["PHID-HWBH-cost"]
        assert (kept.transfer.heads, kept.transfer.body, kept.transfer.gzip) == (bytearray(), bytearray(), None)
        assert server.connections == 1, "the kept connection served every call"


# -- GORGE_WEBHOOK_HONOR_RETRY_AFTER: what a 429 or 503 answer asked for, read and kept per hook ---------------

AT = 1_800_000_000.0  # an epoch for the date forms


def http_date(epoch: float) -> str:
    return email.utils.formatdate(epoch, usegmt=True)


@pytest.mark.parametrize(
    ("head", "seconds"),
    [
        (b"HTTP/1.1 503 X\r\nRetry-After: 120\r\n", 120.0),
        (b"HTTP/1.1 429 X\r\nretry-after:   7 \r\n", 7.0),
        (f"HTTP/1.1 503 X\r\nRetry-After: {http_date(AT + 90)}\r\n".encode(), 90.0),
        (b"HTTP/1.1 503 X\r\nRetry-After: 5\r\nRetry-After: 9\r\n", 9.0),  # the last line counts
        (b"HTTP/1.1 503 X\r\nRetry-After: 99999999999999999999\r\n", float(curl.RETRY_AFTER_MAX_SEC)),
        (
            f"HTTP/1.1 503 X\r\nRetry-After: {http_date(AT + 86_400 * 365)}\r\n".encode(),
            float(curl.RETRY_AFTER_MAX_SEC),
        ),
        (b"HTTP/1.1 503 X\r\n", None),
        (b"HTTP/1.1 503 X\r\nRetry-After: 0\r\n", None),
        (b"HTTP/1.1 503 X\r\nRetry-After: -5\r\n", None),
        (b"HTTP/1.1 503 X\r\nRetry-After: soon\r\n", None),
        (b"HTTP/1.1 503 X\r\nRetry-After: 1.5\r\n", None),  # delay-seconds is whole digits only
        (f"HTTP/1.1 503 X\r\nRetry-After: {http_date(AT - 60)}\r\n".encode(), None),  # already past
        (b"HTTP/1.1 503 X\r\nRetry-After: Sun, 06 Nov 1994 08:49:37\r\n", None),  # a date without its zone
        (b"HTTP/1.1 503 X\r\nX-Retry-After: 30\r\n", None),
    ],
)
def test_retry_after_is_read_as_rfc_9110_says_and_bounded(head: bytes, seconds: float | None) -> None:
    assert curl.retry_after_seconds(head, AT) == seconds


def answering(status: int, retry_after: str) -> Callable[[socket.socket], None]:
    def handler(client: socket.socket) -> None:
        read_request(client)
        head = f"HTTP/1.1 {status} X\r\nRetry-After: {retry_after}\r\nContent-Length: 0\r\nConnection: close\r\n"
        client.sendall(head.encode() + b"\r\n")

    return handler


@pytest.mark.parametrize(("status", "kept"), [(503, True), (429, True), (500, False), (200, False), (301, False)])
def test_a_hooks_handles_keep_what_a_429_or_503_answer_asked_for_once(status: int, kept: bool) -> None:
    with RawServer(answering(status, "30")) as server, closing(curl.Handles()) as handles:
        before = time.monotonic()
        answer = exchange(handles, server.port, "PHID-HWBH-asked", timeout_ms=5000)
        assert answer.status == status, "the status recorded is the answer's, Retry-After or not"
        until = handles.retry_after("PHID-HWBH-asked")
        assert handles.retry_after("PHID-HWBH-asked") is None, "taken once"
        assert handles.retry_after("PHID-HWBH-other") is None
    if kept:
        assert until is not None and before + 29 < until < time.monotonic() + 30
    else:
        assert until is None
