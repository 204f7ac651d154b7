"""What may be shown of an answer from Phorge or a channel: the one rule for every log line, page, JSON value,
stored error and metric label that tells what another server said.

A server chooses its own words, and a hostile or misconfigured one can answer with a secret it was sent (a
Conduit token, an OAuth client secret or code: Phorge's own error texts quote them). So nothing a server
sends is shown as it is, except an error code of a shape that cannot hold a secret: Conduit's `ERR-...`
words (capitals, digits and dashes; every Conduit token is lower case) and OAuth's error codes (RFC 6749's,
by name). Anything else is named by its kind and length only, and a code that holds one of the secrets the
caller names is treated as anything else. Metric labels take only the codes listed here (else `other`), so a
server cannot make new time series either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CODE_MAX = 64
_CONDUIT_CODE = re.compile(r"ERR[-_][A-Z0-9]+(?:[-_][A-Z0-9]+)*")
# Conduit's codes for the methods this service calls (PhabricatorConduitAPIController, ConduitCall, the
# methods' own): the labels of gorge_webhook_alert_conduit_errors.
CONDUIT_CODES = frozenset(
    {
        "ERR-CONDUIT-CORE",
        "ERR-CONDUIT-CALL",
        "ERR-INVALID-AUTH",
        "ERR-INVALID-SESSION",
        "ERR-INVALID-PARAMETER",
        "ERR-UNKNOWN-CLIENT",
        "ERR-BAD-VERSION",
        "ERR-OAUTH-ACCESS",
        "ERR-USER-DISABLED",
    }
)
# RFC 6749 §4.1.2.1 and §5.2: what Phorge's OAuth server (PhabricatorOAuthServer) answers with.
OAUTH_CODES = frozenset(
    {
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "unsupported_response_type",
        "invalid_scope",
        "access_denied",
        "server_error",
        "temporarily_unavailable",
    }
)
OTHER = "other"


def kind(value: object) -> str:
    """A value a server sent, named by its kind and size only: never by what it holds."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"text of {len(value)} character{'' if len(value) == 1 else 's'}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return f"an object of {len(value)} key{'' if len(value) == 1 else 's'}"
    return "a value of another kind"


def _holds_secret(value: str, secrets: Iterable[str]) -> bool:
    return any(secret and (secret in value or value in secret) for secret in secrets)


def conduit_code(value: object, *, secrets: Iterable[str] = ()) -> str:
    """Conduit's error code as it may be shown: the code when it is one of Conduit's words, else what it was."""
    if (
        isinstance(value, str)
        and len(value) <= CODE_MAX
        and _CONDUIT_CODE.fullmatch(value)
        and not _holds_secret(value, secrets)
    ):
        return value
    return f"an error code not of Conduit's form ({kind(value)})"


def conduit_label(code: str) -> str:
    """A Conduit error code as a metric label: Conduit's known codes, else `other`."""
    return code if code in CONDUIT_CODES else OTHER


def oauth_code(value: object, *, secrets: Iterable[str] = ()) -> str:
    """An OAuth error code as it may be shown: one of OAuth's codes, else what it was."""
    if isinstance(value, str) and value in OAUTH_CODES and not _holds_secret(value, secrets):
        return value
    return f"an error code not of OAuth's ({kind(value)})"
