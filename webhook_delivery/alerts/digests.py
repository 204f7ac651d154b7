"""What one message to a channel carries: the pending notifications of the channel as digests, each within
what the channel accepts. Pure: no database, no Django."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..wording import ELLIPSIS, count, cut
from .messages import MARKERS, PREFIX, SUBJECT_LIMIT


@dataclass(frozen=True)
class Note:
    """One pending notification of a channel, as stored."""

    transition: str
    subject: str
    text: str
    id: int = 0


@dataclass(frozen=True)
class Digest:
    """One message to send: the notifications it carries (`ids`), or counts at its end as more."""

    subject: str
    body: str
    ids: tuple[int, ...] = field(default=())


TRAILER_ROOM = 80  # "... and N more (see the dashboard)"


def _counted(notes: Sequence[Note]) -> str:
    numbers = {transition: sum(1 for note in notes if note.transition == transition) for transition in MARKERS}
    return ", ".join(
        part
        for part in (
            f"{count(numbers['entered'], 'new alert')}" if numbers["entered"] else "",
            f"{numbers['recovered']} recovered" if numbers["recovered"] else "",
            f"{numbers['event']} lost" if numbers["event"] else "",
        )
        if part
    )


def digests(notes: Sequence[Note], *, max_chars: int, max_entries: int = 200, max_parts: int = 1) -> list[Digest]:
    """A channel's pending notifications as messages of at most `max_chars` characters (what the channel
    accepts) and `max_entries` entries each, at most `max_parts` of them; what does not fit is counted at
    the end of the last (and is on the dashboard). One notification alone keeps its own subject."""
    if not notes:
        return []
    if len(notes) == 1:
        note = notes[0]
        text = note.text if len(note.text) < max_chars else note.text[: max_chars - 2] + ELLIPSIS
        return [Digest(note.subject or cut(PREFIX + note.text, SUBJECT_LIMIT), text + "\n", (note.id,))]
    counted = _counted(notes)
    parts: list[list[Note]] = [[]]
    head = len(f"gorge-webhook: {counted} (part 10 of 10)\n\n")
    used = head
    for note in notes:
        size = min(len(note.text), max_chars - head - TRAILER_ROOM) + 2
        if parts[-1] and (used + size + TRAILER_ROOM > max_chars or len(parts[-1]) >= max_entries):
            if len(parts) == max_parts:
                break
            parts.append([])
            used = head
        parts[-1].append(note)
        used += size
    carried = sum(len(part) for part in parts)
    found = []
    for number, part in enumerate(parts, 1):
        entries = [
            note.text
            if len(note.text) <= max_chars - head - TRAILER_ROOM
            else note.text[: max_chars - head - TRAILER_ROOM - 1] + ELLIPSIS
            for note in part
        ]
        ids = [note.id for note in part]
        if number == len(parts) and carried < len(notes):
            entries.append(f"... and {len(notes) - carried} more (see the dashboard)")
            ids += [note.id for note in notes[carried:]]
        of = f" (part {number} of {len(parts)})" if len(parts) > 1 else ""
        body = f"gorge-webhook: {counted}{of}\n\n" + "\n\n".join(entries) + "\n"
        found.append(Digest(cut(PREFIX + counted + of, SUBJECT_LIMIT), body, tuple(ids)))
    return found


def digest(notes: Sequence[Note], *, limit: int = 200, max_chars: int = 1_000_000) -> Digest:
    """All of a channel's pending notifications in one message (the e-mail channel's)."""
    return digests(notes, max_chars=max_chars, max_entries=limit)[0]
