"""terminal.py: what reaches a terminal has every control and format character escaped, and other text kept."""

from __future__ import annotations


def test_printable_escapes_controls_and_keeps_other_text() -> None:
    from webhook_delivery.terminal import printable

    assert printable("Ünïcode ✓ name") == "Ünïcode ✓ name"
    assert printable("a\x1b[31mb\x07\x00\x7f\x9b\r\n\t\u2028\u202e\ud800") == (
        "a\\x1b[31mb\\x07\\x00\\x7f\\x9b\\r\\n\\t\\u2028\\u202e\\ud800"
    )
    assert printable("line one\nline\x1b two", keep_newlines=True) == "line one\nline\\x1b two"
