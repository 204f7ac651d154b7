"""What one processing of a request writes back, in Phorge's value domains. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .herald import RequestResult, RequestStatus

HOOK_ERROR = "hook"
SILENT = "silent"
DISABLED = "disabled"
INVALID_URI = "uri"
INVALID_OBJECT = "object"
NOT_FOUND = "not-found"


def http_status(error_code: object) -> int | None:
    """A stored errorCode as an HTTP status (three ASCII digits), else None. Codes come from rows anyone
    could have written: "²" passes str.isdigit() and fails int(), and 5,000 digits fail int() too."""
    code = str(error_code)
    if len(code) == 3 and code.isascii() and code.isdigit() and code[0] != "0":
        return int(code)
    return None


def is_success(error_type: str, error_code: object) -> bool:
    """Phorge files a success under errorType/errorCode too: http and a 2xx status."""
    status = http_status(error_code)
    return error_type == "http" and status is not None and 200 <= status < 300


@dataclass(frozen=True)
class HttpOutcome:
    """What PHP would store: `errorType` (http or timeout) and `errorCode`; success iff 2xx status."""

    error_type: str
    error_code: int
    # What the attempt saw besides, for the attempt log only: outcomes compare by what PHP would store.
    status: int | None = field(default=None, compare=False)  # the final HTTP status, when an answer came
    response_bytes: int | None = field(default=None, compare=False)
    redirects: int = field(default=0, compare=False)
    body_prefix: bytes = field(default=b"", compare=False)  # the answer's first bytes, only when asked for

    @property
    def ok(self) -> bool:
        return self.error_type == "http" and 200 <= self.error_code <= 299


@dataclass(frozen=True)
class Outcome:
    status: str  # queued | sent | failed
    result: str  # none | okay | fail
    error_type: str  # hook | http | timeout
    error_code: int | str  # int for HTTP status and libcurl numbers, str for hook codes (PHP's types)
    attempted: bool  # lastRequestEpoch = now when attempted, else 0
    http: HttpOutcome | None = None  # what the HTTP attempt saw, when there was one

    @property
    def retried(self) -> bool:
        return self.status == RequestStatus.QUEUED


def from_http(http: HttpOutcome, *, retry_forever: bool) -> Outcome:
    if http.ok:
        return Outcome(RequestStatus.SENT, RequestResult.OKAY, http.error_type, http.error_code, True, http)
    status = RequestStatus.QUEUED if retry_forever else RequestStatus.FAILED
    return Outcome(status, RequestResult.FAIL, http.error_type, http.error_code, True, http)


def configuration_failure(code: str) -> Outcome:
    """PHP's failRequest(): permanent, and `none`/0 so it never feeds the breaker."""
    return Outcome(RequestStatus.FAILED, RequestResult.NONE, HOOK_ERROR, code, attempted=False)


def with_error(properties: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """errorType/errorCode overwritten in place or appended, every other key kept where it was."""
    updated = dict(properties)
    updated["errorType"] = outcome.error_type
    updated["errorCode"] = outcome.error_code
    return updated


def retries_forever(properties: dict[str, Any]) -> bool:
    return properties.get("retry") == "forever"
