"""phorge/config.py, database-free: Phorge's local file refused with its reason when it is too deep or not a
regular file (the rest: tests/db/test_phorge_config.py, tests/process/test_phorge_config.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from webhook_delivery.config import read_local_file

DEEP = "[" * 100_000 + "]" * 100_000


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
