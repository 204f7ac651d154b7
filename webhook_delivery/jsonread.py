"""The one JSON reader for what comes from Phorge or an operator: a config_entry value, the hoststate map,
Phorge's local.json, GORGE_WEBHOOK_CLUSTER_DATABASES or GORGE_WEBHOOK_OUTBOUND_BLACKLIST, an OAuth or Conduit
answer. Pure, no Django.

Bounded in size and depth, and never raising: what cannot be decoded is None, as PHP's json_decode gives
null. PHP refuses more than 512 levels of nesting; Python's decoder raises RecursionError (not ValueError)
past about a thousand, which a reader catching only ValueError lets escape as a crash.
"""

from __future__ import annotations

import json
from typing import Any

PHP_DEPTH = 512  # json_decode's default $depth: deeper documents decode to null
MAX_BYTES = 4 * 1024 * 1024  # far above any value Phorge or an operator writes


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in a decoded value (a scalar is 0), without recursion."""
    deepest, level = 0, [value]
    while level:
        containers = [item for item in level if isinstance(item, (list, dict))]
        if not containers:
            break
        deepest += 1
        level = [child for item in containers for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def decode(data: str | bytes | bytearray, *, max_bytes: int = MAX_BYTES) -> Any | None:
    """`data` decoded like PHP's json_decode($data, true): None for anything it would give null for (not
    UTF-8, not JSON, NaN or Infinity, deeper than PHP_DEPTH) and for more than `max_bytes`."""
    if len(data) > max_bytes:
        return None
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError, UnicodeDecodeError, TypeError):
        return None
    if isinstance(value, (list, dict)) and depth(value) > PHP_DEPTH:
        return None
    return value
