"""JSON nobody expected, and a local file that stops being one (the second security review, items 1 and 11):
one config_entry row, the hoststate map, local.json or a variable nested deeper than any decoder's stack
count as null, as PHP's json_decode gives, and never crash a worker, `check` or a page; a local.json swapped
for a FIFO or made unreadable under a running worker pauses delivery, says so, and never hangs it.

Here: what needs no database and no server process; the rest is in tests/process/test_json_hardening.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from webhook_delivery import jsonread
from webhook_delivery.config import read_local_file

DEEP = "[" * 100_000 + "]" * 100_000


DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


def test_the_reader_gives_null_for_what_json_decode_cannot_read() -> None:
    assert jsonread.decode(DEEP) is None and jsonread.decode(DEEP_OBJECT) is None
    assert jsonread.decode("[" * 512 + "]" * 512) is not None, "PHP reads 512 levels"
    assert jsonread.decode("[" * 513 + "]" * 513) is None, "and no more"
    assert jsonread.decode("NaN") is None and jsonread.decode(b"\xff") is None and jsonread.decode("{") is None
    assert jsonread.decode('"x"' + " " * 10, max_bytes=8) is None
    assert jsonread.decode('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}


def test_a_deep_or_non_regular_local_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    assert read_local_file(str(deep)) == (None, "not valid JSON (or nested deeper than PHP reads)")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert read_local_file(str(fifo)) == (None, "not a regular file")
    assert time.monotonic() - started < 1, "a FIFO never blocks the reader"
    assert read_local_file(str(tmp_path)) == (None, "Is a directory")


def test_json_log_lines_carry_no_raw_control_or_format_character() -> None:
    import logging

    from webhook_delivery.logformat import JsonFormatter

    hostile = "a\x7f\x85\u2028\u202ez\x1b[2J"
    record = logging.LogRecord("webhook_delivery.x", logging.INFO, __file__, 1, hostile, None, None)
    record.hook = hostile
    line = JsonFormatter().format(record)
    assert line.isascii() and line.isprintable()
    assert json.loads(line)["message"] == hostile and json.loads(line)["hook"] == hostile
