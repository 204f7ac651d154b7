"""What Phorge records of an answer that libcurl read: arcanist's parse of the raw buffer. Pure.

With CURLOPT_HEADER, libcurl hands PHP one buffer: the header block of every followed redirect, every
interim (1xx) block and the final answer's head, then the final body. HTTPSFuture drops one block per
followed redirect (up to each first CRLFCRLF), then BaseHTTPFuture::parseRawHTTPResponse takes the first
block up to a blank line, skips it when it is "100 ..." or a proxy's "200 Connection established", and
records the status of the next one; a body labelled `Content-Encoding: gzip` must decode. Whatever does
not fit those patterns is Phorge's malformed answer (HTTPFutureParseResponseStatus, code 1), which the
webhook worker stores as `http` / 1.

The patterns below are PCRE's, written for Python's `re` on bytes, which reads them the same way here: `\\d`
is [0-9], `\\s` the six ASCII spaces, `.` with DOTALL any byte, `$` the end or before a final newline.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Callable
from time import thread_time
from typing import NamedTuple

MALFORMED = 1  # HTTPFutureParseResponseStatus::ERROR_MALFORMED_RESPONSE
PHP_INT_MAX = 2**63 - 1  # (int) of a longer digit string saturates there

_STATUS_LINE = re.compile(rb"HTTP/\S+ (\d+) ?(.*?)(?:\r?\n(.*))?$", re.S)
_LINE_END = re.compile(rb"\r?\n")
_FIELD = re.compile(rb"(.*?):\s*(.*)$")


@functools.lru_cache(maxsize=32)
def _redirect_blocks(count: int) -> re.Pattern[bytes]:
    return re.compile(rb"(?:.*?\r\n\r\n){%d}" % count, re.S)


def strip_redirects(buffer: bytes, redirects: int) -> bytes:
    """HTTPSFuture's preg_replace('/^(.*\\r\\n\\r\\n){N}/sU', ''): the first N CRLFCRLF-ended pieces go,
    or nothing when there are fewer."""
    if redirects <= 0:
        return buffer
    match = _redirect_blocks(redirects).match(buffer)
    return buffer[match.end() :] if match else buffer


class Head(NamedTuple):
    """The block Phorge takes for the answer: its status, whether its body must gunzip, and where in the
    parsed buffer that body starts."""

    status: int
    gzip: bool
    body_at: int


def final_head(buffer: bytes) -> Head | None:
    """parseRawHTTPResponse's loop over `buffer` (redirect blocks already stripped); None: malformed."""
    at = 0
    while True:
        blank = _blank_line(buffer, at)
        if blank is None:
            return None
        status_line = _STATUS_LINE.match(buffer, at, blank[0])
        if status_line is None:
            return None
        code = min(int(status_line.group(1)), PHP_INT_MAX)
        reason = status_line.group(2).lower()
        at = blank[1]
        if code == 100 or (code == 200 and reason == b"connection established"):
            continue
        return Head(code, _content_encoding(status_line.group(3)) == b"gzip", at)


def _blank_line(buffer: bytes, at: int) -> tuple[int, int] | None:
    """Where rex_base's head ends and its body starts: "^(.*?)\r?\n\r?\n(.*)$" with /s takes the leftmost
    line end followed by another, a CR before either included."""
    newline = buffer.find(b"\n", at)
    while newline >= 0:
        after = newline + 1
        if buffer.startswith(b"\n", after):
            end = after + 1
        elif buffer.startswith(b"\r\n", after):
            end = after + 2
        else:
            newline = buffer.find(b"\n", after)
            continue
        return (newline - 1 if newline > at and buffer[newline - 1] == 13 else newline), end
    return None


def _content_encoding(fields: bytes | None) -> bytes | None:
    """parseHeaders(), then the value of the first field named Content-Encoding (ASCII case aside)."""
    if not fields or fields == b"0" or b"encoding" not in fields.lower():  # PHP: "0" is empty too
        return None
    for line in _LINE_END.split(fields):
        field = _FIELD.match(line)
        if field is not None and field.group(1).lower() == b"content-encoding":
            return field.group(2)
        if field is None and line.lower() == b"content-encoding":
            return None  # array($line, null): the first such field, with no value
    return None


class GzipCheck:
    """Whether bytes fed in turn would pass PHP's gzdecode(): one whole gzip member first (what follows it
    is ignored), decoded in small steps and dropped, so that memory stays bounded whatever it expands to.

    With a budget (`max_output` bytes inflated, `max_cpu` seconds of `cpu()`, the calling thread's CPU time)
    it stops inflating once either is spent: `spent` is then true and `decodes` says what the part inflated
    showed (no error in it, and the member's end when it came within the budget)."""

    _STEP = 64 * 1024

    def __init__(
        self, *, max_output: int | None = None, max_cpu: float | None = None, cpu: Callable[[], float] = thread_time
    ) -> None:
        self._decoder = zlib.decompressobj(wbits=31)
        self._failed = False
        self._max_output = max_output
        self._max_cpu = max_cpu
        self._cpu = cpu
        self._used_cpu = 0.0
        self.output = 0
        self.spent = False

    def feed(self, data: bytes) -> None:
        if self._failed or self.spent or self._decoder.eof:
            return
        started = self._cpu() if self._max_cpu is not None else 0.0
        try:
            self._inflate(data)
            while self._decoder.unconsumed_tail and not self._decoder.eof and not self._over(started):
                self._inflate(self._decoder.unconsumed_tail)
        except zlib.error:
            self._failed = True
        self._over(started)
        if self._max_cpu is not None:
            self._used_cpu += self._cpu() - started

    def _inflate(self, data: bytes) -> None:
        self.output += len(self._decoder.decompress(data, self._STEP))

    def _over(self, started: float) -> bool:
        if self._max_output is not None and self.output >= self._max_output:
            self.spent = True
        elif self._max_cpu is not None and self._used_cpu + self._cpu() - started >= self._max_cpu:
            self.spent = True
        return self.spent

    @property
    def decodes(self) -> bool:
        return not self._failed and (self._decoder.eof or self.spent)


def gzdecodes(data: bytes, *, max_output: int | None = None, max_cpu: float | None = None) -> bool:
    check = GzipCheck(max_output=max_output, max_cpu=max_cpu)
    check.feed(data)
    return check.decodes


def recorded_status(buffer: bytes, redirects: int) -> int | None:
    """The status Phorge records for a whole buffer, or None for its malformed answer: the one-shot
    form of what the delivery path judges as the answer streams in (worker/curl.py)."""
    rest = strip_redirects(buffer, redirects)
    head = final_head(rest)
    if head is None or (head.gzip and not gzdecodes(rest[head.body_at :])):
        return None
    return head.status
