"""Log formatters: LOG_FORMAT=text (one line, fields as key=value) and LOG_FORMAT=json (one object a line).

Both carry every field a log call passes (request and hook PHIDs, error type and code, reasons, counts);
no call passes a URI or a key. Fields can hold Phorge's text (a PHID is whatever the row holds): no control
character of it reaches the line raw, in either format.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from .terminal import printable

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def fields(record: logging.LogRecord) -> dict[str, object]:
    """The extra fields of a log call that are plain values. Objects are left out: Django passes the
    HttpRequest of every 4xx/5xx response, whose text holds the query string (and so a `?token=`)."""
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _STANDARD and not key.startswith("_") and isinstance(value, (str, int, float, bool, type(None)))
    }


def _text_value(value: object) -> str:
    text = "-" if value is None else str(value)
    if not text or printable(text) != text or any(ch.isspace() or ch in '"=' for ch in text):
        # JSON's escapes, all of ASCII; json.dumps leaves DEL (0x7f) raw.
        return json.dumps(text).replace("\x7f", "\\u007f")
    return text


class RefusalsWithoutTraceback(logging.Filter):
    """Django logs a refusal for lack of a permission (403) with the exception's traceback: it is no error, and
    the line says all there is (the page says the rest)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("django.") and getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger> <message> key=value ...`: the fields in the line, before any traceback."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        line = printable(super().formatMessage(record))
        extra = " ".join(f"{key}={_text_value(value)}" for key, value in fields(record).items())
        return f"{line} {extra}" if extra else line

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return printable(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return printable(super().formatStack(stack_info), keep_newlines=True)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(fields(record))
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = record.exc_info[0].__name__
        # All of ASCII: C1 controls, DEL, U+2028 and bidirectional overrides reach a log shipper only escaped.
        return json.dumps(entry).replace("\x7f", "\\u007f")
