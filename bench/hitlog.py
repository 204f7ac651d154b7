"""The receivers' log: one line per request, "<epoch seconds.millis> <status> <path> <signature or ->".

nginx writes it through its `log_format` (bench/receivers.py), bench/pyreceiver.py and bench/hangreceiver.py
through `line()`; `parse()` reads any of them back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from webhook_delivery.phorge.payload import SIGNATURE_HEADER as SIGNATURE_HEADER


@dataclass(frozen=True)
class Hit:
    at: float
    status: int
    path: str
    signature: str


def line(status: int, path: str, signature: str) -> str:
    """The log line of a request answered (or, status 0, arrived) now."""
    return f"{time.time():.3f} {status} {path} {signature}\n"


def parse(text: str) -> Hit | None:
    """The hit of one complete log line; None for a partial or foreign line."""
    parts = text.split()
    if len(parts) != 4 or not text.endswith("\n"):
        return None
    return Hit(float(parts[0]), int(parts[1]), parts[2], parts[3])
