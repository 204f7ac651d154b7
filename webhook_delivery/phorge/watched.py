"""Phorge's `conf/local/local.json`, read again when it changes, as Phorge's processes read it on their next
start: the file is looked at (stat) at most once a second."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import read_local_file
from .filestamp import Recheck, Stamp, file_stamp

LOCAL_FILE_REREAD_SEC = 30.0  # read again this often even when nothing about the file seems to change


@dataclass(frozen=True)
class LocalRead:
    """What the local configuration file gave: its values, or why it could not be read."""

    path: str
    values: dict[str, Any] | None
    problem: str = ""


class LocalConfigFile:
    """Phorge's `conf/local/local.json`, re-read whenever the file changes (checked at most once a second).

    The file is a JSON object of option to value as `bin/config set` writes it (`[]` once every key was
    deleted). Anything else, a missing file included, is a problem reported with the path: the variable
    says the file is there, so its absence is a wrong mount, not an empty configuration.
    """

    def __init__(self, path: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._recheck = Recheck(clock)
        self._stamp: Stamp | None = None
        self._loaded = float("-inf")
        self._read = LocalRead(path, None, "not read yet")

    def read(self) -> LocalRead:
        with self._recheck.lock:
            if not self._recheck.due():
                return self._read
            try:
                stamp = file_stamp(self.path)
            except OSError as exc:
                self._stamp, self._read = None, LocalRead(self.path, None, exc.strerror or type(exc).__name__)
                return self._read
            # The forced re-read notices what no stamp shows (an ACL).
            stale = self._clock() - self._loaded >= LOCAL_FILE_REREAD_SEC
            if stamp != self._stamp or self._read.values is None or stale:
                values, problem = read_local_file(self.path)
                self._stamp, self._read, self._loaded = stamp, LocalRead(self.path, values, problem), self._clock()
            return self._read
