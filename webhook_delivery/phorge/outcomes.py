"""What one processing of a request writes back, in Phorge's value domains, and the one table of the error
codes it stores with their labels. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .herald import RequestResult, RequestStatus
from .phpjson import UndecodableProperties, decode_properties, encode_compact

HOOK_ERROR = "hook"  # the errorType of a configuration failure; its errorCode is a HookError code


class HookError(Enum):
    """PHP's failRequest() codes (errorType `hook`) and HeraldWebhookRequest's display names for them."""

    SILENT = "silent", "In Silent Mode"
    DISABLED = "disabled", "Hook Disabled"
    INVALID_URI = "uri", "Invalid URI"
    INVALID_OBJECT = "object", "Invalid Object"
    NOT_FOUND = "not-found", "Hook Not Found"

    def __init__(self, code: str, label: str) -> None:
        self.code = code
        self.label = label


class CurlError(Enum):
    """libcurl's error numbers (CURLE_<name>) that an attempt records under errorType `http` or `timeout`,
    as PHP records them, and the dashboard's words for them (None: shown as the number alone)."""

    UNSUPPORTED_PROTOCOL = 1, "malformed response"  # also Phorge's own code for an answer it cannot parse
    URL_MALFORMAT = 3, "malformed URL"
    COULDNT_RESOLVE_PROXY = 5, "could not resolve the proxy"
    COULDNT_RESOLVE_HOST = 6, "could not resolve host"
    COULDNT_CONNECT = 7, "could not connect"
    WEIRD_SERVER_REPLY = 8, "unreadable reply"
    PARTIAL_FILE = 18, None
    OUT_OF_MEMORY = 27, "answer too large"
    OPERATION_TIMEDOUT = 28, "timed out"
    SSL_CONNECT_ERROR = 35, "TLS handshake failed"
    TOO_MANY_REDIRECTS = 47, "too many redirects"
    GOT_NOTHING = 52, "empty reply"
    SEND_ERROR = 55, "send failed"
    RECV_ERROR = 56, "connection reset"
    PEER_FAILED_VERIFICATION = 60, "certificate not trusted"
    SSL_CACERT_BADFILE = 77, "CA bundle unreadable"
    PROXY = 97, "refused by the proxy"

    def __init__(self, number: int, label: str | None) -> None:
        self.number = number
        self.label = label


SILENT = HookError.SILENT.code
DISABLED = HookError.DISABLED.code
INVALID_URI = HookError.INVALID_URI.code
INVALID_OBJECT = HookError.INVALID_OBJECT.code
NOT_FOUND = HookError.NOT_FOUND.code

_HOOK_LABELS = {error.code: error.label for error in HookError}
_CURL_LABELS = {str(error.number): error.label for error in CurlError if error.label is not None}


def hook_error_label(code: str) -> str:
    """Phorge's display name for a hook errorCode; a code it does not know, as stored."""
    return _HOOK_LABELS.get(code, code)


def curl_error_label(code: str) -> str | None:
    """The dashboard's words for a stored libcurl number, None for one without."""
    return _CURL_LABELS.get(code)


def http_status(error_code: object) -> int | None:
    """A stored errorCode as an HTTP status (three ASCII digits), else None. Codes come from rows anyone
    could have written: "²" passes str.isdigit() and fails int(), and 5,000 digits fail int() too."""
    code = str(error_code)
    if len(code) == 3 and code.isascii() and code.isdigit() and code[0] != "0":
        return int(code)
    return None


def error_label(error_type: str, error_code: object) -> str:
    """Phorge's wording for a stored errorType/errorCode pair (HeraldWebhookRequest's display names), the
    one rendering of a stored error on pages, in the admin and in alerts."""
    code = str(error_code)
    if not error_type and not code:  # marked failed by the poison rule, properties left as stored
        return "Unreadable request (left as stored)"
    if error_type == HOOK_ERROR:
        return f"Hook error: {hook_error_label(code)}"
    if error_type == "timeout":
        return f"Timeout ({code})"
    if error_type == "http":
        if is_success(error_type, code):
            return f"HTTP {code} (success)"
        if http_status(code) is not None:
            return f"HTTP {code}"
        reason = curl_error_label(code)
        return f"cURL {code}: {reason}" if reason else f"cURL {code[:20]}"
    return f"{error_type} {code}".strip()


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


def readable_properties(text: str | None) -> tuple[dict[str, Any] | None, str]:
    """The decoded properties when they can be both read and written back with an outcome, else None
    and the reason (a number beyond a double, nesting deeper than the encoder goes, not an object...)."""
    try:
        properties = decode_properties(text or "")
        encode_compact(with_error(properties, _WRITE_PROBE))
    except UndecodableProperties as exc:
        return None, str(exc)
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        return None, f"properties cannot be written back: {type(exc).__name__}"
    return properties, ""


_WRITE_PROBE = Outcome(RequestStatus.QUEUED, RequestResult.FAIL, "timeout", 28, attempted=True)
