"""Where libcurl goes next through a proxy, foreseen from the header lines it hands over, and each hop checked
before the proxy is asked for it (webhook_delivery/worker/proxy.py). The real proxy and the real redirects are
in tests/process/test_proxy.py."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from webhook_delivery.config import parse_blacklist
from webhook_delivery.phorge.netguard import make_resolver
from webhook_delivery.worker.proxy import ProxyHops

BLACKLIST = parse_blacklist("10.0.0.0/8")


def resolver(answers: dict[str, str]) -> Any:
    def lookup(host: str, port: int, *args: Any) -> list[Any]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if answers[host] == "SERVFAIL":
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    return make_resolver(lookup)


def hops(url: str = "https://hooks.example/a/b?c", **answers: str) -> ProxyHops:
    guard = ProxyHops(resolver({"hooks.example": "192.0.2.1", **answers}))
    guard.reset(url.encode(), BLACKLIST, time.monotonic() + 5)
    return guard


def answer(guard: ProxyHops, *lines: bytes) -> None:
    for line in lines:
        guard.header(line)


def test_the_first_hop_was_checked_before_and_goes_on() -> None:
    guard = hops()
    assert guard.opening() and guard.sending()
    answer(guard, b"HTTP/1.1 200 OK\r\n", b"Content-Length: 0\r\n", b"\r\n")
    assert not guard.refused and not guard.error


@pytest.mark.parametrize(
    ("location", "lands"),
    [
        (b"Location: https://inside.example/x\r\n", "inside.example"),
        (b"location:   /relative/path \t\r\n", "hooks.example"),  # relative to the current URL, blanks trimmed
        (b"LOCATION: //inside.example/y\r\n", "inside.example"),
        (b"Location: ../up space\r\n", "hooks.example"),  # libcurl encodes the space and follows
    ],
)
def test_a_redirect_is_checked_where_libcurl_goes_when_it_moves_on(location: bytes, lands: str) -> None:
    guard = hops(**{"inside.example": "10.1.2.3"})
    assert guard.sending()
    answer(guard, b"HTTP/1.1 302 Found\r\n", location, b"Content-Length: 0\r\n", b"\r\n")
    assert not guard.refused, "nothing is checked before libcurl moves on"
    moved = guard.opening()
    assert moved == (lands != "inside.example")
    assert guard.refused == (lands == "inside.example")


def test_the_first_non_empty_location_of_a_3xx_answer_is_the_one_followed() -> None:
    guard = hops(**{"inside.example": "10.1.2.3", "other.example": "192.0.2.9"})
    assert guard.sending()
    answer(
        guard,
        b"HTTP/1.1 103 Early Hints\r\n",
        b"Location: https://inside.example/hint\r\n",  # not a 3xx: libcurl takes no Location from it
        b"\r\n",
        b"HTTP/1.1 307 Temporary Redirect\r\n",
        b"Location:  \r\n",  # empty: ignored, as libcurl does
        b"Location: https://other.example/z\r\n",
        b"Location: https://inside.example/z\r\n",
        b"\r\n",
    )
    assert guard.sending() and not guard.refused


def test_the_proxys_answer_to_connect_is_not_the_hops_answer() -> None:
    guard = hops()
    assert guard.opening()
    answer(guard, b"HTTP/1.1 200 Connection established\r\n", b"\r\n")  # before the request: the tunnel
    assert guard.sending() and not guard.refused


def test_libcurl_moving_on_after_an_answer_without_a_foreseen_hop_is_refused() -> None:
    guard = hops()
    assert guard.sending()
    answer(guard, b"HTTP/1.1 399 Odd\r\n", b"Content-Length: 0\r\n", b"\r\n")
    assert not guard.opening() and guard.refused


def test_a_request_started_again_before_any_answer_is_the_same_hop() -> None:
    guard = hops()
    assert guard.sending()  # a kept connection that died before answering: libcurl retries it afresh
    assert guard.opening() and guard.sending() and not guard.refused


def test_a_hops_host_that_cannot_be_looked_up_now_is_curls_6_as_without_a_proxy() -> None:
    guard = hops(**{"flaky.example": "SERVFAIL"})
    assert guard.sending()
    answer(guard, b"HTTP/1.1 301 Moved\r\n", b"Location: http://flaky.example/\r\n", b"\r\n")
    assert not guard.opening()
    assert (guard.error, guard.refused) == (6, False)


def test_a_hops_host_that_does_not_exist_is_refused_as_the_first_hops_is() -> None:
    guard = hops()
    assert guard.sending()
    answer(guard, b"HTTP/1.1 301 Moved\r\n", b"Location: http://nowhere.example/\r\n", b"\r\n")
    assert not guard.sending() and guard.refused


def test_an_ip_literal_hop_is_checked_without_a_lookup() -> None:
    guard = ProxyHops(make_resolver(lambda *args: pytest.fail("looked up")))
    guard.reset(b"http://192.0.2.1/x", BLACKLIST, time.monotonic() + 5)
    assert guard.sending()
    answer(guard, b"HTTP/1.1 308 Permanent\r\n", b"Location: http://[::ffff:10.0.0.1]:8080/\r\n", b"\r\n")
    assert not guard.opening() and guard.refused
