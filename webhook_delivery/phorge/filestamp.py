"""When to look at a file of Phorge's install again, and how to tell that it changed (watched.py,
cabundle.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

RECHECK_SEC = 1.0

Stamp = tuple[int, ...]


def file_stamp(path: str) -> Stamp:
    """What changes when the file is replaced, rewritten or has its permissions changed (a chmod or chown
    changes ctime only). Raises OSError when it cannot be looked at."""
    info = os.stat(path)
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_mode)


class Recheck:
    """Whether a file is due to be looked at again: at most once every RECHECK_SEC."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()  # held by the caller around due() and what it then reads
        self._checked = float("-inf")

    def due(self) -> bool:
        if self.clock() - self._checked < RECHECK_SEC:
            return False
        self._checked = self.clock()
        return True
