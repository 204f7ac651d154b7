"""GORGE_WEBHOOK_HONOR_RETRY_AFTER: a 429 or 503 answer's Retry-After read from what libcurl received
(worker/curl.py), and a hook held back by it in the scheduler (worker/scheduling.py), only when asked for."""

from __future__ import annotations

import email.utils
import socket
import time
from collections.abc import Callable
from contextlib import closing

import pytest

from tests.support.rawserver import RawServer, read_request
from tests.support.twin_worker import HOOK, NOW, OTHER
from tests.unit.test_curl import exchange
from webhook_delivery.worker import curl
from webhook_delivery.worker.job import Job, JobResult
from webhook_delivery.worker.metrics import Counters
from webhook_delivery.worker.scheduling import Lane, Scheduler
from webhook_delivery.worker.window import Settlement

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


def finished(scheduler: Scheduler, hook: str) -> None:
    job = Job(hook, None, [])
    scheduler.start(job, Lane.NEW)
    scheduler.finish(job, JobResult(Settlement(hook, [])))


@pytest.mark.parametrize("honor", [True, False])
def test_the_scheduler_holds_a_hook_back_until_its_retry_after_only_when_honoring_it(honor: bool) -> None:
    asked = {HOOK: time.monotonic() + 60}
    scheduler = Scheduler(
        4, estimated_now=lambda: NOW, counters=Counters(), retry_after=asked.pop, honor_retry_after=honor
    )
    finished(scheduler, HOOK)
    assert not asked, "what the answer asked for is taken, whether honored or not"
    assert scheduler.schedulable(HOOK) is not honor
    assert scheduler.schedulable(OTHER), "another hook is not held back"
    scheduler.wait_until[HOOK] = time.monotonic() - 1
    assert scheduler.schedulable(HOOK), "once the time has passed"
