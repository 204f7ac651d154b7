"""The sign-in log lines: one stable event key each, and the fields that name whom a line is about.

Every line of webhook_delivery.phorge_auth carries `event` (below), and, when it is about a user, `user`
(the Phorge user name; the local account's for a refused password login) and `phid` (the Phorge user's
PHID), plus `reason` when there is one. Both log formats write these fields: text as key=value after the
message, JSON as keys of the object. A user name and a PHID come from Phorge's answer, so they are
untrusted text: escaped here (terminal.printable) before any formatter sees them, so that no control
character, line break or bidirectional override of them reaches a line raw, in either format.
"""

from __future__ import annotations

from webhook_delivery.terminal import printable

SIGNED_IN = "auth.signed_in"  # a Phorge administrator signed in
REFUSED = "auth.refused"  # a sign-in refused: not an administrator, disabled, a bad state, an OAuth error
PHORGE_UNREACHABLE = "auth.phorge_unreachable"  # no usable answer from Phorge (at sign-in, or a user's re-check)
OAUTH_SERVER_MISSING = "auth.oauth_server_missing"  # Phorge answers 404 for its OAuth server's pages
PHORGE_ANSWERS = "auth.phorge_answers"  # a user's re-check is answered again after failing
DEMOTED = "auth.demoted"  # a re-check refused: the session ends and the account loses staff
SESSION_ENDED = "auth.session_ended"  # a session ended for another reason (no answer for too long, ...)
LOCAL_LOGIN_REFUSED = "auth.local_login_refused"  # a local password login refused (Phorge sign-in only)

ALL = (
    SIGNED_IN,
    REFUSED,
    PHORGE_UNREACHABLE,
    OAUTH_SERVER_MISSING,
    PHORGE_ANSWERS,
    DEMOTED,
    SESSION_ENDED,
    LOCAL_LOGIN_REFUSED,
)


def event(key: str, *, reason: str = "") -> dict[str, object]:
    """`extra` for a line about no particular user."""
    fields: dict[str, object] = {"event": key}
    if reason:
        fields["reason"] = printable(reason)
    return fields


def about(key: str, user: str, phid: str | None, *, reason: str = "") -> dict[str, object]:
    """`extra` for a line about one user: the event, the user name and the PHID (each escaped; no `phid`
    for a local account, which has none)."""
    fields = {**event(key, reason=reason), "user": printable(user)}
    if phid is not None:
        fields["phid"] = printable(phid)
    return fields
