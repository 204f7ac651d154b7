"""What a requeue may select, shared by `requeue_webhooks`, the worker that carries out the dashboard's
requeues and the dashboard's dry run: the error filter, the moments `--since` and `--until` take, why a
failed request is left failed, and how many one action may requeue."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from .phorge.outcomes import HOOK_ERROR

ERROR_TYPES = ("http", "timeout", HOOK_ERROR)
GC_MARGIN_SEC = 3600  # closer than this to Phorge's collection, a request may vanish before it goes out
CAP_PER_ACTION = 100  # the command asks first above this many; one action of the dashboard requeues at most this many

DISABLED = "hook disabled (Phorge would not deliver it)"
NO_KEY = "hook has no HMAC key (it would stay queued)"
TOO_OLD = "too close to Phorge's garbage collection (7 days after creation by default)"
UNREADABLE = "properties unreadable (it would fail again)"
OBJECT_GONE = "object deleted in Phorge (it would fail again as hook/object)"


class RequeueError(ValueError):
    """Bad input or a selection that must not run; the message says which and what to do."""


@dataclass(frozen=True)
class ErrorFilter:
    error_type: str
    error_code: str | None = None

    @classmethod
    def parse(cls, value: str) -> ErrorFilter:
        kind, _, code = value.strip().partition("/")
        if kind not in ERROR_TYPES:
            raise RequeueError(f"--error {value!r}: expected timeout, http, http/<code> or hook/<code>")
        if code and not re.fullmatch(r"[a-z0-9-]{1,32}", code):
            raise RequeueError(f"--error {value!r}: the code is a number (http/503) or a word (hook/uri)")
        return cls(kind, code or None)

    def matches(self, error_type: str, error_code: str) -> bool:
        return error_type == self.error_type and (self.error_code is None or error_code == self.error_code)

    def __str__(self) -> str:
        return self.error_type if self.error_code is None else f"{self.error_type}/{self.error_code}"


_RELATIVE = re.compile(r"(\d+)\s*([smhd])", re.ASCII)  # ASCII digits: Python's \d matches any script's
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
LATEST = int(datetime.max.replace(microsecond=0, tzinfo=UTC).timestamp())  # 9999-12-31 23:59:59 UTC
_SHOWN = 40  # characters of a bad value repeated in its error


def _shown(value: str) -> str:
    text = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
    return repr(text)  # repr(): no control character of the input reaches the terminal


def parse_when(value: str, now: int) -> int:
    """A moment as unix seconds: `09:00` (today, UTC), `2026-12-01`, `2026-12-01T09:00` (UTC unless an offset
    is given), or an age such as `90m`, `2h`, `3d`. Anything before 1970 or after 9999 (UTC) is refused."""
    text = value.strip()
    relative = _RELATIVE.fullmatch(text)
    out_of_range = RequeueError(
        f"{_shown(value)} is out of range: a time must fall between 1970-01-01 and 9999-12-31 (UTC)"
    )
    if relative:
        digits = relative.group(1).lstrip("0") or "0"
        if len(digits) > len(str(LATEST)):  # int() of thousands of digits fails; far less is out of range
            raise out_of_range
        moment_sec = now - int(digits) * _UNITS[relative.group(2)]
    else:
        today = datetime.fromtimestamp(now, UTC)
        try:
            if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", text, re.ASCII):
                clock = datetime.strptime(text if text.count(":") == 2 else f"{text}:00", "%H:%M:%S")
                moment = today.replace(hour=clock.hour, minute=clock.minute, second=clock.second, microsecond=0)
            else:
                moment = datetime.fromisoformat(text)
                if moment.tzinfo is None:
                    moment = moment.replace(tzinfo=UTC)
        except ValueError:
            raise RequeueError(
                f"{_shown(value)} is not a time: use 09:00 (today, UTC), 2026-12-01T09:00 (UTC unless an offset "
                "is given) or an age such as 90m, 2h, 3d"
            ) from None
        try:
            moment_sec = int(moment.timestamp())
        except (OverflowError, ValueError, OSError):
            raise out_of_range from None
    if not 0 <= moment_sec <= LATEST:
        raise out_of_range
    return moment_sec
