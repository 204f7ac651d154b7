"""How times, durations and short lines are worded for people, the same on pages, in the admin and in alerts.
Pure: no database, no Django."""

from __future__ import annotations

from datetime import UTC, datetime

ELLIPSIS = "…"


def duration(seconds: int | float | None) -> str:
    """A length of time as people say it: `45 s`, `3 min`, `5 h`, `2 days`; `-` when unknown."""
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{round(seconds / 3600)} h"
    days = round(seconds / 86400)
    return f"{days} day{'' if days == 1 else 's'}"


def ago(epoch: int | float | None, now: int | float) -> str:
    """`3 min ago`, or `never`."""
    if not epoch:
        return "never"
    return f"{duration(max(0, now - epoch))} ago"


def moment(epoch: int | float | None, now: int | float) -> str:
    """A point in time on the database clock: `20:31 UTC` on the day of `now`, else `2026-11-30 20:31 UTC`;
    `never` for none."""
    if not epoch:
        return "never"
    when = datetime.fromtimestamp(int(epoch), UTC)
    today = datetime.fromtimestamp(int(now), UTC).date()
    return when.strftime("%H:%M UTC") if when.date() == today else when.strftime("%Y-%m-%d %H:%M UTC")


def cut(text: str, limit: int) -> str:
    """`text` on one line and at most `limit` characters, cut at a word with an ellipsis when it is longer."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    head = line[: limit - len(ELLIPSIS)]
    if line[len(head)] != " " and " " in head:  # the last word does not fit whole: leave it out
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:-(") + ELLIPSIS


def count(number: int, singular: str, plural: str | None = None) -> str:
    """`1 request`, `3 requests`."""
    return f"{number} {singular if number == 1 else plural or singular + 's'}"


LINK_INDENT = "    "  # an alert's links: each on a line of its own, so indented, after its text


def split_links(body: str) -> tuple[str, list[str]]:
    """An alert's body as its text and its links (the indented lines it ends with)."""
    lines = body.split("\n")
    links: list[str] = []
    while lines and lines[-1].startswith(LINK_INDENT):
        links.insert(0, lines.pop().strip())
    return "\n".join(lines), links
