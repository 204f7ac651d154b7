"""The tally's rows in Django's database (records/models.py: HeraldTally, TallyChunk): who refreshes it now, when
the next refresh may start, and the counts the pages read (reads/tally.py says what they count).

One process refreshes at a time, whatever the hosts: it takes the row's lease with one guarded UPDATE, only
once `next_at` has passed, and writes the result only while it still holds the lease. Times here are Django's
database clock (`Now()`), so that hosts whose clocks differ still agree on whose turn it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import DateTimeField, ExpressionWrapper, Q
from django.db.models.functions import Now

from ..reads.attempt_digest import Digest
from ..reads.tally import Chunk, Settled, Waiting, totals_from, waiting_from
from .models import HeraldTally, TallyChunk

LEASE_SEC = 120  # a refresher that dies mid-way holds the turn at most this long


def source_of(alias: str) -> str:
    """Which herald database a tally counts: its engine, host, port and name (never a user or password)."""
    conf = connections[alias].settings_dict
    return f"{conf.get('ENGINE', '')}:{conf.get('HOST', '')}:{conf.get('PORT', '')}/{conf.get('NAME', '')}"[:255]


def _later(seconds: float) -> Any:
    """Django's database clock, `seconds` from now."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


@dataclass(frozen=True)
class Snapshot:
    """The counts as the pages read them."""

    as_of: int | None  # Phorge's database clock at the refresh; None: never refreshed
    complete: bool  # False while the history is still being counted (then the counts are partial)
    refreshed_at: datetime | None
    key_status: bool | None
    cost: dict[str, Any]
    settled: dict[str, Settled] = field(default_factory=dict)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    refusals: list[tuple[int, int, str]] = field(default_factory=list)  # (dateModified, id, hook), newest first
    attempts: Digest = field(default_factory=Digest)
    next_at: datetime | None = None
    holder: str = ""
    held_until: datetime | None = None


def read(source: str) -> Snapshot | None:
    row = HeraldTally.objects.filter(source=source).defer("state").first()
    if row is None:
        return None
    return Snapshot(
        as_of=row.as_of,
        complete=row.complete,
        refreshed_at=row.refreshed_at,
        key_status=row.key_status,
        cost=dict(row.cost or {}),
        settled=totals_from(row.settled),
        waiting=waiting_from(row.waiting),
        refusals=[(int(a), int(b), str(c)) for a, b, c in row.refusals or []],
        attempts=Digest.from_json(row.attempts),
        next_at=row.next_at,
        holder=row.holder,
        held_until=row.held_until,
    )


def _free(grace: float) -> Q:
    return (Q(held_until__isnull=True) | Q(held_until__lt=Now())) & (
        Q(next_at__isnull=True) | Q(next_at__lte=_later(-grace))
    )


def take(source: str, holder: str, *, grace: float = 0.0) -> bool:
    """Take the turn to refresh (once `next_at` and `grace` have passed and no one holds it); whether it was."""
    try:
        with transaction.atomic():
            HeraldTally.objects.get_or_create(source=source)
    except IntegrityError:
        pass  # another process made the row at the same moment
    taken = (
        HeraldTally.objects.filter(source=source)
        .filter(_free(grace))
        .update(holder=holder, held_until=_later(LEASE_SEC))
    )
    return taken == 1


def give_back(source: str, holder: str) -> None:
    HeraldTally.objects.filter(source=source, holder=holder).update(holder="", held_until=None)


@dataclass
class Stored:
    """What the refresher reads back: its own bookkeeping and the totals of the chunks."""

    tally_id: int
    state: dict[str, Any]
    settled: dict[str, Settled]
    attempts: Digest


def load(source: str) -> Stored:
    row = HeraldTally.objects.only("id", "state", "settled", "attempts").get(source=source)
    return Stored(row.id, dict(row.state or {}), totals_from(row.settled), Digest.from_json(row.attempts))


def chunks(tally_id: int, numbers: Iterable[int] | None = None) -> dict[int, Chunk]:
    """The chunks named (every chunk when None)."""
    found = TallyChunk.objects.filter(tally_id=tally_id)
    if numbers is not None:
        found = found.filter(number__in=list(numbers))
    return {number: Chunk.from_json(number, hooks) for number, hooks in found.values_list("number", "hooks")}


def save(
    source: str,
    holder: str,
    *,
    as_of: int,
    complete: bool,
    key_status: bool | None,
    cost: Mapping[str, Any],
    state: Mapping[str, Any],
    settled: Mapping[str, Any],
    waiting: Mapping[str, Any],
    refusals: list[Any],
    attempts: Mapping[str, Any],
    changed: Iterable[Chunk],
    dropped: Iterable[int],
    next_in: float,
    reset: bool = False,
) -> bool:
    """Write a refresh, in one transaction, if `holder` still holds the turn; gives the turn back."""
    with transaction.atomic():
        written = HeraldTally.objects.filter(source=source, holder=holder).update(
            as_of=as_of,
            complete=complete,
            key_status=key_status,
            cost=dict(cost),
            state=dict(state),
            settled=dict(settled),
            waiting=dict(waiting),
            refusals=refusals,
            attempts=dict(attempts),
            refreshed_at=Now(),
            next_at=_later(next_in),
            holder="",
            held_until=None,
        )
        if written != 1:
            transaction.set_rollback(True)
            return False
        tally_id = HeraldTally.objects.only("id").get(source=source).id
        rows = TallyChunk.objects.filter(tally_id=tally_id)
        if reset:
            rows.delete()
        else:
            rows.filter(number__in=list(dropped)).delete()
        # MySQL and MariaDB take no conflict target: the unique key decides.
        target = ["tally", "number"] if connections["default"].features.supports_update_conflicts_with_target else None
        TallyChunk.objects.bulk_create(
            [TallyChunk(tally_id=tally_id, number=chunk.number, hooks=chunk.to_json()) for chunk in changed],
            update_conflicts=True,
            unique_fields=target,
            update_fields=["hooks"],
        )
    return True
