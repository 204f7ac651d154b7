"""Phorge's parse of the raw buffer libcurl hands PHP (phorge/rawanswer.py): the same answer as PHP's own
regular expressions and gzdecode() give (tests/support/phorge_parse.php, run by php-cli), on the shapes that
matter and on generated buffers."""

from __future__ import annotations

import gzip
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.curl_oracle import PARSE
from webhook_delivery.phorge.rawanswer import GzipCheck, recorded_status, strip_redirects

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def php_status(buffer: bytes, redirects: int = 0) -> int | None:
    with tempfile.NamedTemporaryFile(prefix="raw-") as raw:
        Path(raw.name).write_bytes(buffer)
        out = subprocess.run(["php", str(PARSE), raw.name, str(redirects)], capture_output=True, check=True)
    code = int(out.stdout.split()[1])
    return None if code == 1 else code  # Phorge's malformed answer is code 1, as a "status" of 1 would be


SHAPES = [
    (OK, 0, 200),
    (b"HTTP/1.1 100 Continue\r\n\r\n" + OK, 0, 200),
    (b"HTTP/1.1 100 Whatever\r\n\r\n" + OK, 0, 200),
    (b"HTTP/1.1 102 Processing\r\n\r\n" + OK, 0, 102),
    (b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 404 No\r\n\r\n", 0, 404),
    (b"HTTP/1.1 200 CONNECTION ESTABLISHED\r\n\r\nHTTP/1.1 404 No\r\n\r\n", 0, 404),
    (b"HTTP/1.1 302 Found\r\nLocation: /b\r\n\r\n" + OK, 1, 200),
    (b"HTTP/1.1 302 Found\nLocation: /b\n\n" + OK, 1, None),  # no CRLFCRLF before the body's: all eaten
    (b"HTTP/1.1 302 Found\r\n\r\n", 2, 302),  # fewer blocks than redirects: nothing stripped
    (b"HTTP/1.1  200 OK\r\n\r\n", 0, None),
    (b"HTTP/1.1 200\r\n\r\n", 0, 200),
    (b"HTTP/1.1 0200 OK\r\n\r\n", 0, 200),
    (b"HTTP/1.1 99999999999999999999999 Big\r\n\r\n", 0, 2**63 - 1),
    (b"http/1.1 200 OK\r\n\r\n", 0, None),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0", 0, None),  # no blank line
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n" + gzip.compress(b"x"), 0, 200),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\nplain", 0, None),
    (b"HTTP/1.1 200 OK\r\ncontent-encoding:gzip\r\n\r\nplain", 0, None),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip \r\n\r\nplain", 0, 200),  # "gzip " is not gzip
    (b"HTTP/1.1 200 OK\r\nContent-Encoding\r\nContent-Encoding: gzip\r\n\r\nplain", 0, 200),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Encoding: gzip\r\n\r\nplain", 0, 200),
    (b"HTTP/1.1 204 No Content\r\nContent-Encoding: gzip\r\n\r\n", 0, None),
]


@pytest.mark.needs_tool("php")
@pytest.mark.parametrize(("buffer", "redirects", "status"), SHAPES)
def test_the_shapes_are_read_as_php_reads_them(buffer: bytes, redirects: int, status: int | None) -> None:
    assert recorded_status(buffer, redirects) == status
    assert php_status(buffer, redirects) == status


PIECES = st.sampled_from(
    [b"HTTP/1.1 ", b"HTTP/1.0 ", b"HTTP/2 ", b"100", b"102", b"200", b"302", b" ", b"OK", b"Continue",
     b"Connection established", b"\r\n", b"\n", b"\r", b"\r\n\r\n", b"Content-Encoding:", b" gzip", b"GZIP",
     b"X: y", b":", b"0", gzip.compress(b"hello"), b"\x1f\x8b", b"\xff"]
)  # fmt: skip


@pytest.mark.needs_tool("php")
@settings(max_examples=150, deadline=None)
@given(st.lists(PIECES, max_size=14).map(b"".join), st.integers(0, 3))
def test_any_buffer_is_read_as_php_reads_it(buffer: bytes, redirects: int) -> None:
    assert recorded_status(buffer, redirects) == php_status(buffer, redirects)


def test_redirect_blocks_are_dropped_up_to_each_crlfcrlf() -> None:
    two = b"HTTP/1.1 301 A\r\nLocation: /b\r\n\r\nHTTP/1.1 302 B\r\nLocation: /c\r\n\r\n"
    assert strip_redirects(two + OK, 2) == OK
    assert strip_redirects(two + OK, 0) == two + OK


def test_a_gzip_bomb_is_checked_in_bounded_steps() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    check = GzipCheck()
    for start in range(0, len(bomb), 4096):
        check.feed(bomb[start : start + 4096])
    assert check.decodes
    check = GzipCheck()
    check.feed(bomb[: len(bomb) // 2])
    assert not check.decodes


def test_a_budget_stops_the_inflating_and_says_what_the_part_inflated_showed() -> None:
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))
    check = GzipCheck(max_output=1024 * 1024)
    check.feed(bomb)
    assert check.spent and check.decodes and 1024 * 1024 <= check.output < 2 * 1024 * 1024
    check.feed(b"not gzip at all")  # past the budget nothing more is inflated, or judged
    assert check.decodes and check.output < 2 * 1024 * 1024
    broken = GzipCheck(max_output=1024 * 1024)
    broken.feed(b"\x1f\x8b\x08\x00" + b"\xff" * 64)  # an error before the budget is spent stays one
    assert not broken.spent and not broken.decodes

    ticks = iter(range(1000))  # a CPU clock that advances one second a read: the second step spends it
    timed = GzipCheck(max_cpu=1.5, cpu=lambda: float(next(ticks)))
    timed.feed(bomb)
    assert timed.spent and timed.decodes and timed.output <= 2 * 64 * 1024
    unbudgeted = GzipCheck()
    unbudgeted.feed(bomb)
    assert unbudgeted.decodes and not unbudgeted.spent and unbudgeted.output == 8 * 1024 * 1024
