"""Argument types shared by the commands (deliver_webhooks, watch_webhooks): whole numbers in ASCII digits
within the range of the setting they stand for, each refusal naming the range, as config.py reads settings."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..config import MAX_CONCURRENT_RANGE, POLL_INTERVAL_MS_RANGE, parse_whole, range_text


def whole(minimum: int, maximum: int, what: str = "a whole number") -> Callable[[str], int]:
    def parse(value: str) -> int:
        number = parse_whole(value)
        if number is None or not minimum <= number <= maximum:
            raise argparse.ArgumentTypeError(f"expected {what} {range_text(minimum, maximum)}, got {value!r}")
        return number

    return parse


max_concurrent = whole(*MAX_CONCURRENT_RANGE)
poll_interval_ms = whole(*POLL_INTERVAL_MS_RANGE)
port = whole(1, 65535, "a TCP port")
