"""What may be shown of an answer from Phorge or a channel: the one rule for every log line, page, JSON value,
stored error and metric label that tells what another server said.

A server chooses its own words, and a hostile or misconfigured one can answer with a secret it was sent (a
Conduit token, an OAuth client secret or code: Phorge's own error texts quote them), or a secret changed a
little (upper-cased, halved, reversed, without its `api-`). So nothing a server sends is shown as it is,
except an error code Phorge itself can answer: Conduit's codes and OAuth's, each listed below as Phorge's
source has them (every `ERR-...` of its Conduit methods and controller, every error its OAuth server
answers). Anything else is named by its kind and length only. Metric labels take only these codes (else
`other`), so a server cannot make new time series either.
"""

from __future__ import annotations

from collections.abc import Iterable

# Every Conduit error code in Phorge's source (src/: ConduitException codes, the methods' getErrorTypes(), the
# API controller's; read from Phorge master 07c1a51310, 2026.27 and 2025.51). A disabled user's token is
# refused as ERR-INVALID-AUTH (PhabricatorConduitAPIController::validateAuthenticatedUser).
CONDUIT_CODES = frozenset(
    """
    ERR-ARRAY-SOURCEPHIDS ERR-ARRAY-TYPES ERR-BAD-AUTHORPHIDS ERR-BAD-DIFF ERR-BAD-DOCUMENT ERR-BAD-FILE ERR-BAD-ID
    ERR-BAD-IDS ERR-BAD-NAMES ERR-BAD-OBJECTPHID ERR-BAD-PHID ERR-BAD-PHIDS ERR-BAD-QUERYKEY ERR-BAD-REVISION
    ERR-BAD-SOURCEPHIDS ERR-BAD-TASK ERR-BAD-TOKEN ERR-BAD-TOKENPHID ERR-BAD-TYPES ERR-BAD-VERSION ERR-CONDUIT-CALL
    ERR-CONDUIT-CORE ERR-INVALID-ATTACHMENT ERR-INVALID-ATTACHMENTS-FORMAT ERR-INVALID-AUTH ERR-INVALID-CERTIFICATE
    ERR-INVALID-CONSTRAINT ERR-INVALID-CONSTRAINT-AUTHORPHIDS-FORMAT ERR-INVALID-CONSTRAINT-PHIDS-FORMAT
    ERR-INVALID-CONSTRAINTS-FORMAT ERR-INVALID-CONTENTS ERR-INVALID-ENGINE ERR-INVALID-OBJECT-PHID
    ERR-INVALID-OBJECT-PHID-FORMAT ERR-INVALID-OBJECT-TYPE ERR-INVALID-OBJECT-TYPE-FORMAT ERR-INVALID-PAGE-SIZE
    ERR-INVALID-PARAMETER ERR-INVALID-PARAMETERS ERR-INVALID-SESSION ERR-INVALID-TOKEN ERR-INVALID-USER
    ERR-INVALID_ENGINE ERR-NEED-DIFF ERR-NEED-FILE ERR-NO-CERTIFICATE ERR-NO-CONTENT ERR-NO-EFFECT ERR-NO-PASTE
    ERR-NOT-FOUND ERR-OAUTH-ACCESS ERR-PERMISSIONS ERR-RATE-LIMIT ERR-UNKNOWN-CLIENT ERR-UNKNOWN-REPOSITORY
    ERR-UNKNOWN-TYPE ERR-UNKNOWN-VCS-TYPE ERR-UNSUPPORTED-VCS ERR-USAGE-NO-SOURCE-PATH ERR_BAD_DIFF ERR_BAD_PASTE
    ERR_BAD_POLL ERR_BAD_REVISION ERR_BAD_TASK ERR_CLOSED ERR_EMPTY_PARTICIPANT_PHIDS ERR_EMPTY_TITLE ERR_FULLTEXT
    ERR_NEED_PARAM ERR_NOT_FOUND ERR_NO_NAME ERR_USAGE_NO_ROOM_ID ERR_USAGE_NO_UPDATES ERR_USAGE_ONLY_SELF_REMOVE
    ERR_USAGE_ROOM_NOT_FOUND ERR_WRONG_USER
    """.split()
)
# What Phorge's OAuth server answers (PhabricatorOAuthServerAuthController, PhabricatorOAuthServerTokenController).
OAUTH_CODES = frozenset(
    {
        "access_denied",
        "invalid_client",
        "invalid_grant",
        "invalid_request",
        "server_error",
        "unsupported_grant_type",
        "unsupported_response_type",
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
    """Conduit's error code as it may be shown: the code when Conduit knows it, else what it was."""
    if isinstance(value, str) and value in CONDUIT_CODES and not _holds_secret(value, secrets):
        return value
    return f"an error code not known to Conduit ({kind(value)})"


def conduit_label(code: str) -> str:
    """A Conduit error code as a metric label: Conduit's known codes, else `other`."""
    return code if code in CONDUIT_CODES else OTHER


def oauth_code(value: object, *, secrets: Iterable[str] = ()) -> str:
    """An OAuth error code as it may be shown: one Phorge's OAuth server answers, else what it was."""
    if isinstance(value, str) and value in OAUTH_CODES and not _holds_secret(value, secrets):
        return value
    return f"an error code not known to OAuth ({kind(value)})"
