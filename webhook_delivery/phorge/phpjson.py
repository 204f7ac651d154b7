"""PHP-compatible JSON: the encoders behind the `properties` column and the payload. Pure, no database.

PHP has two encoders in play: `phutil_json_encode` (plain json_encode: compact, `/` escaped) for the
`properties` column and `PhutilJSON::encodeFormatted` (2-space indent, `": "`, slashes raw) for the
payload. Both escape non-ASCII as lowercase `\\uXXXX` (surrogate pairs), leave DEL (0x7f) raw, and treat
PHP arrays the PHP way: an empty array or one keyed exactly 0..n-1 is a JSON list.
"""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring_ascii as _encode_ascii  # the C encoder json.dumps uses
from typing import Any

# An escaped DEL preceded by an even number of backslashes is a real escape, not escaped text.
_ESCAPED_DEL = re.compile(r"(?<!\\)((?:\\\\)*)\\u007f")


class UndecodableProperties(ValueError):
    """The column is not a JSON object PHP's json_decode would accept; it must be left untouched."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Made once: json.dumps() and json.loads() with arguments of their own build a new coder on every call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_COMPACT = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def decode_properties(text: str) -> dict[str, Any]:
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise UndecodableProperties("properties is not valid JSON") from exc
    if isinstance(value, list):  # a PHP array with keys 0..n-1
        return {str(index): item for index, item in enumerate(value)}
    if not isinstance(value, dict):
        raise UndecodableProperties("properties is not a JSON object")
    return value


def as_php_array(value: Any) -> Any:
    """Reshape decoded JSON the way a json_decode/json_encode round trip in PHP would."""
    if isinstance(value, dict):
        if not value or all(key == str(i) for i, key in enumerate(value)):
            return [as_php_array(v) if isinstance(v, _CONTAINERS) else v for v in value.values()]
        return {key: as_php_array(v) if isinstance(v, _CONTAINERS) else v for key, v in value.items()}
    if isinstance(value, list):
        return [as_php_array(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return value


_CONTAINERS = (dict, list)


def _php_strings(text: str) -> str:
    return _ESCAPED_DEL.sub("\\1\x7f", text) if "\\u007f" in text else text


def encode_scalar(value: Any) -> str:
    """One string, integer or boolean as PhutilJSON writes it (slashes raw); TypeError for anything else."""
    if isinstance(value, str):
        return _php_strings(_encode_ascii(value))
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"not a scalar the payload template handles: {type(value).__name__}")


def encode_compact(value: Any) -> str:
    """PHP json_encode($value) with no flags."""
    text = _COMPACT.encode(as_php_array(value))
    return _php_strings(text.replace("/", "\\/"))


def encode_formatted(value: Any) -> str:
    """PhutilJSON::encodeFormatted($value): two-space indent, `": "`, slashes unescaped, final newline."""
    text = json.dumps(as_php_array(value), ensure_ascii=True, indent=2, allow_nan=False)
    return _php_strings(text) + "\n"
