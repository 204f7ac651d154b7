"""jsonread.py: JSON nested deeper than any decoder's stack reads as null, as PHP's json_decode gives."""

from __future__ import annotations

from webhook_delivery import jsonread

DEEP = "[" * 100_000 + "]" * 100_000


DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


def test_the_reader_gives_null_for_what_json_decode_cannot_read() -> None:
    assert jsonread.decode(DEEP) is None and jsonread.decode(DEEP_OBJECT) is None
    assert jsonread.decode("[" * 512 + "]" * 512) is not None, "PHP reads 512 levels"
    assert jsonread.decode("[" * 513 + "]" * 513) is None, "and no more"
    assert jsonread.decode("NaN") is None and jsonread.decode(b"\xff") is None and jsonread.decode("{") is None
    assert jsonread.decode('"x"' + " " * 10, max_bytes=8) is None
    assert jsonread.decode('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
