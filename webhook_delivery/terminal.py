"""Untrusted text (hook names, anything read from Phorge's rows) made safe to write to a terminal or a log line.

One function: `printable()` escapes every character that a terminal or a line-oriented reader would act on
instead of showing (C0 and C1 controls such as ESC, BEL, CR and LF, DEL, bidirectional overrides, line and
paragraph separators) as a visible backslash escape, and leaves all other text, including non-ASCII, as is.
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Cc: C0, DEL and C1 controls; bidi embeddings, overrides and isolates, and the marks that steer them;
# line and paragraph separators; lone surrogates (no encoding can write them).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}\u2028\u2029\ud800-\udfff]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\\x00-\\x09\\x0b-\\x1f\\x7f-\\x9f{_BIDI}\u2028\u2029\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control character escaped (`\\x1b`, `\\n`, `\\u202e`); `keep_newlines` leaves
    line feeds alone (for tracebacks, whose lines are ours)."""
    return (_UNSAFE_BUT_NEWLINE if keep_newlines else _UNSAFE).sub(_escape, text)
