"""Hook holds (default database): an operator stops delivery to one hook without losing its events.

`manage.py hold_webhooks` writes them; running workers read the held PHIDs at each heartbeat (one query
of one indexed column) and claim none of those hooks' requests, which stay `queued` in Phorge, untouched,
so Phorge shows them as queued and they go out, each once, after the release. The pages read the active
holds with who, when and why.

Reasons and authors are untrusted text shown on pages and terminals: they are bounded in length and may
hold no control character (checked here, before anything is stored).
"""

from __future__ import annotations

import getpass
import logging
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import DatabaseError, IntegrityError, connections, transaction

from ..terminal import printable
from .models import HookHold

logger = logging.getLogger(__name__)

HOOK_PHID_RE = re.compile(r"PHID-HWBH-[A-Za-z0-9]{1,54}")
REASON_MAX = HookHold._meta.get_field("reason").max_length or 200
HELD_BY_MAX = HookHold._meta.get_field("held_by").max_length or 150


class HoldError(ValueError):
    """Input refused: the message is safe to show (any untrusted part escaped)."""


@dataclass(frozen=True)
class Hold:
    hook_phid: str
    reason: str
    held_by: str
    held_at: datetime


def check_hook_phid(value: str) -> str:
    if HOOK_PHID_RE.fullmatch(value) is None:
        raise HoldError(f"{printable(value)!r} is not a hook PHID (PHID-HWBH-...)")
    return value


def _check_text(what: str, value: str, limit: int) -> str:
    value = value.strip()
    if printable(value) != value:  # printable() escapes exactly the characters refused here
        raise HoldError(f"{what} may not contain control characters: {printable(value)!r}")
    if len(value) > limit:
        raise HoldError(f"{what} is {len(value)} characters long, at most {limit} are kept")
    return value


def check_reason(value: str) -> str:
    return _check_text("the reason", value, REASON_MAX)


def check_held_by(value: str) -> str:
    value = _check_text("the author (--by)", value, HELD_BY_MAX)
    if not value:
        raise HoldError("the author (--by) may not be empty")
    return value


def os_user() -> str:
    """Who runs the command, as the operating system says (a container may have no name for the uid)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def _as_hold(row: HookHold) -> Hold:
    return Hold(row.hook_phid, row.reason, row.held_by, row.held_at)


def active_holds() -> list[Hold]:
    """Every hold in force, oldest first (for pages and `--list`). Raises DatabaseError."""
    return [_as_hold(row) for row in HookHold.objects.order_by("held_at", "id")]


def hold_of(hook_phid: str) -> Hold | None:
    """The hold on this hook, if any (for the hook page). Raises DatabaseError."""
    row = HookHold.objects.filter(hook_phid=hook_phid).first()
    return None if row is None else _as_hold(row)


def held_hook_phids() -> set[str]:
    """The held hooks' PHIDs: the workers' one cheap query. Raises DatabaseError."""
    return set(HookHold.objects.values_list("hook_phid", flat=True))


def hold(hook_phid: str, *, reason: str, held_by: str) -> tuple[Hold, bool]:
    """Hold a hook (PHID and texts already checked); (the hold in force, whether this call made it). A hook
    held already keeps its hold as it is: who held it and why are not overwritten."""
    try:
        with transaction.atomic(using="default"):
            row, created = HookHold.objects.get_or_create(
                hook_phid=hook_phid,
                defaults={"reason": reason, "held_by": held_by, "held_at": datetime.now(UTC)},
            )
    except IntegrityError:  # held at the same moment by someone else
        row, created = HookHold.objects.get(hook_phid=hook_phid), False
    return _as_hold(row), created


def release(hook_phid: str) -> Hold | None:
    """Release a hook's hold; the hold that was released, None if the hook was not held."""
    with transaction.atomic(using="default"):
        row = HookHold.objects.select_for_update().filter(hook_phid=hook_phid).first()
        if row is None:
            return None
        row.delete()
    return _as_hold(row)


class HeldHooks:
    """A worker's view of the holds, refreshed at each heartbeat.

    When Django's database cannot be read, the last set read stays in force: a held hook is not released
    by an outage, and the other hooks are delivered as before. Said once when it starts, once when it ends.
    """

    def __init__(self) -> None:
        self.current: frozenset[str] = frozenset()
        self._failing = False

    def refresh(self) -> frozenset[str]:
        try:
            fresh = frozenset(held_hook_phids())
        except DatabaseError:
            if not self._failing:
                logger.warning(
                    "cannot read hook holds from Django's database (DATABASE_URL): keeping the holds last read",
                    extra={"event": "hold.read_failed", "hooks_held": len(self.current)},
                )
            self._failing = True
            connections["default"].close_if_unusable_or_obsolete()
            return self.current
        if self._failing:
            logger.info("hook holds read again", extra={"event": "hold.read_again"})
            self._failing = False
        for phid in sorted(fresh - self.current):
            logger.warning(
                "hook held: its requests stay queued until the hold is released",
                extra={"event": "hold.seen", "hook": phid},
            )
        for phid in sorted(self.current - fresh):
            logger.info(
                "hook hold released: delivering its requests", extra={"event": "hold.release_seen", "hook": phid}
            )
        self.current = fresh
        return fresh
