"""The suite's one way to wait: poll a condition until it holds, with a deadline that names what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float, what: str, *, every: float = 0.1) -> T:
    """Calls `condition` every `every` seconds until it returns something true, and returns that; fails with
    "timed out waiting for <what>" after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return found
