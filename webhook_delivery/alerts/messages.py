"""Every alert's words, in one place, as values: each condition's facts in, a subject and a body out. Pure:
no database, no Django. Times are Phorge's database clock; counts belong to the incident.

A subject is one line of at most SUBJECT_LIMIT characters, cut at a word (an e-mail client folds longer
ones at odd places); the body says what happened in plain words and ends with the links. Phorge's text
(hook names, error texts) is shown inside backticks with backticks and line breaks taken out, so it can
neither end its quotation nor forge a line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..phorge.outcomes import error_label
from ..wording import LINK_INDENT, count, cut, duration, moment, split_links

PREFIX = "[gorge-webhook] "
SUBJECT_LIMIT = 78
MARKERS = {"entered": "ALERT", "recovered": "RECOVERED", "event": "LOST"}
PHIDS_SHOWN = 10
TIMES = "\N{MULTIPLICATION SIGN}"


@dataclass(frozen=True)
class Message:
    """What one condition's start, end or event says: `subject` one short line, `body` the whole story."""

    subject: str
    body: str

    def text(self, transition: str) -> str:
        """The body as one entry of a digest, marked ALERT, RECOVERED or LOST."""
        return f"{MARKERS[transition]:<10} {self.body}"


def message(subject: str, lines: Iterable[str], links: Iterable[str] = ()) -> Message:
    body = "\n".join([*(line for line in lines if line), *(f"{LINK_INDENT}{link}" for link in links if link)])
    return Message(cut(PREFIX + subject, SUBJECT_LIMIT), body)


JOINER = "\N{WORD JOINER}"  # invisible: it only keeps what is on either side from being read as one token
_DEFUSED = (("@", "@" + JOINER), ("](", "]" + JOINER + "("), ("://", ":" + JOINER + "//"))


def plain(value: str, limit: int = 200) -> str:
    """Phorge's text, untrusted in every channel: on one line, without control characters or backticks, and
    unable to mention anyone (`@here`, `@channel`), make a link (`[x](https://...)`, a bare URL) or, once the
    chat channel escapes < and >, any of Slack's <!channel> or <url|label>. It reads the same."""
    shown = "".join(" " if not ch.isprintable() else "'" if ch == "`" else ch for ch in value)
    shown = " ".join(shown.split())[:limit]
    for found, defused in _DEFUSED:
        shown = shown.replace(found, defused)
    return shown


def quoted(value: str) -> str:
    """Phorge's text inside backticks, on one line, unable to close them."""
    return f"`{plain(value)}`"


@dataclass(frozen=True)
class HookRef:
    phid: str
    name: str
    id: int = 0

    def named(self) -> str:
        return f"{quoted(self.name)} ({self.phid})" if self.name else self.phid


@dataclass(frozen=True)
class Links:
    """This service's page and Phorge's page for what the message is about, where their addresses are known."""

    site: str = ""  # GORGE_ALERT_SITE_URL, no trailing slash
    phorge: str = ""  # Phorge's base URI, no trailing slash

    def hook(self, hook: HookRef) -> list[str]:
        return [
            f"{self.site}/hooks/{hook.phid}/" if self.site else "",
            f"{self.phorge}/herald/webhook/view/{hook.id}/" if self.phorge and hook.id else "",
        ]

    def dashboard(self) -> list[str]:
        return [f"{self.site}/" if self.site else ""]

    def phorge_page(self, path: str) -> str:
        return f"{self.phorge}{path}" if self.phorge else ""


def _errors(errors: Sequence[tuple[str, str, int]]) -> str:
    return ", ".join(f"{plain(error_label(kind, code))} {TIMES} {number}" for kind, code, number in errors)


def _stored_error(kind: str, code: str) -> str:
    return f"{plain(error_label(kind, code))} ({plain(kind, 40)}/{plain(code, 40)})"


# -- a hook whose receiver fails -----------------------------------------------------------------------


@dataclass(frozen=True)
class Failing:
    hook: HookRef
    now: int
    since: int  # the first failed attempt after the last success
    last_success: int | None
    failed: int  # requests whose last attempt failed since the last success
    errors: tuple[tuple[str, str, int], ...]  # their (errorType, errorCode, requests), most first
    last_error: tuple[str, str] | None
    queued: int
    due: int
    in_backoff: bool = False
    window_failures: int = 0
    threshold: int = 0
    window_sec: int = 0
    last_object: tuple[str, str] | None = None  # the last failed request's object: Phorge's name and page


def failing(facts: Failing, links: Links) -> Message:
    hook, now = facts.hook, facts.now
    since = f"since {moment(facts.since, now)} ({duration(now - facts.since)})"
    if facts.in_backoff:
        subject = f"Hook {quoted(hook.name)} in Phorge's breaker backoff"
        what = (
            f"Hook {hook.named()} is in Phorge's breaker backoff: {facts.window_failures} failed attempts in the "
            f"last {duration(facts.window_sec)} (threshold {facts.threshold}); failing {since}."
        )
    else:
        subject = f"Hook {quoted(hook.name)} failing since {moment(facts.since, now)}"
        what = f"Hook {hook.named()} has been failing {since}."
    if facts.failed:
        failures = f"{count(facts.failed, 'request')} " + ("failed since then" if facts.last_success else "have failed")
        failures += f": {_errors(facts.errors)}." if facts.errors else "."
    else:
        failures = ""
    success = (
        f"Its last success was at {moment(facts.last_success, now)}."
        if facts.last_success
        else "It has no success on record" + (";" if failures else ".")
    )
    last = f"Last error: {_stored_error(*facts.last_error)}" if facts.last_error else ""
    page = ""
    if last and facts.last_object is not None:
        # The object's page is a link of its own, with the others (a link in a task, outside its literal
        # block, and on the dashboard), not words inside the text.
        name, page = facts.last_object
        last += f", for {quoted(name)}"
    last += "." if last else ""
    queue = f"{facts.queued} queued, {facts.due} due now."
    said = " ".join(part for part in (success, failures, last) if part)
    return message(subject, [what, said, queue], [*links.hook(hook), page])


@dataclass(frozen=True)
class FailingOver:
    """How a failing hook's condition ended: it delivered again, was disabled or deleted, or lost its key."""

    hook: HookRef
    now: int
    since: int
    ended: str  # "delivers", "disabled", "gone", "no key", "no failure"
    last_success: int | None = None
    queued: int = 0


def failing_over(facts: FailingOver, links: Links) -> Message:
    hook, now = facts.hook, facts.now
    was = f"it had been failing since {moment(facts.since, now)} ({duration(now - facts.since)})"
    if facts.ended == "delivers":
        subject = f"Hook {quoted(hook.name)} delivers again"
        what = (
            f"Hook {hook.named()} delivers again: a request succeeded at {moment(facts.last_success, now)}; "
            f"{was}. {facts.queued} queued."
        )
    elif facts.ended == "gone":
        subject = f"Hook {quoted(hook.name)} no longer exists"
        what = f"Hook {hook.named()} no longer exists in Phorge; {was}."
    elif facts.ended == "disabled":
        subject = f"Hook {quoted(hook.name)} was disabled"
        what = f"Hook {hook.named()} was disabled in Phorge, so nothing is sent to it; {was}."
    elif facts.ended == "no key":
        subject = f"Hook {quoted(hook.name)} has no HMAC key"
        what = f"Hook {hook.named()} has no HMAC key now: its requests wait, unsent, until one is set; {was}."
    else:
        subject = f"Hook {quoted(hook.name)} no longer failing"
        what = f"Hook {hook.named()} has no failed request left in Phorge's table; {was}."
    return message(subject, [what], links.hook(hook))


# -- requests near (or lost to) Phorge's garbage collection --------------------------------------------


@dataclass(frozen=True)
class NearCollection:
    hook: HookRef
    now: int
    requests: int
    oldest: int  # dateCreated of the oldest
    retention: int


def near_collection(facts: NearCollection, links: Links) -> Message:
    left = facts.oldest + facts.retention - facts.now
    when = (
        f"in {count(round(left / 3600), 'hour')}"
        if left >= 3600
        else f"in {duration(left)}"
        if left > 0
        else "at Phorge's next garbage collection"
    )
    subject = f"{count(facts.requests, 'request')} to {quoted(facts.hook.name)} deleted by Phorge {when}"
    what = (
        f"{count(facts.requests, 'request')} to hook {facts.hook.named()} will be deleted by Phorge {when} unless "
        f"delivered: the oldest was queued at {moment(facts.oldest, facts.now)}, and Phorge keeps requests "
        f"{duration(facts.retention)} (phd.garbage-collection)."
    )
    return message(subject, [what], links.hook(facts.hook))


def near_collection_over(hook: HookRef, warning_sec: float, links: Links) -> Message:
    return message(
        f"No request to {quoted(hook.name)} near Phorge's collection",
        [
            f"No queued request to hook {hook.named()} is within {duration(warning_sec)} of Phorge's garbage "
            "collection any more: delivered, requeued or deleted (a deletion is told as LOST)."
        ],
        links.hook(hook),
    )


@dataclass(frozen=True)
class Lost:
    hook: HookRef
    now: int
    request_phids: tuple[str, ...]
    oldest: int
    newest: int
    total: int  # lost in all for this hook


def lost(facts: Lost, links: Links) -> Message:
    number = len(facts.request_phids)
    created = moment(facts.oldest, facts.now) + (
        f" to {moment(facts.newest, facts.now)}" if facts.newest != facts.oldest else ""
    )
    shown = ", ".join(facts.request_phids[:PHIDS_SHOWN])
    more = f" and {number - PHIDS_SHOWN} more" if number > PHIDS_SHOWN else ""
    return message(
        f"{count(number, 'request')} to {quoted(facts.hook.name)} lost to Phorge's collection",
        [
            f"{count(number, 'queued request')} to hook {facts.hook.named()} were deleted by Phorge's garbage "
            f"collection before they were delivered (created {created}): {shown}{more}; {facts.total} lost in all "
            "for this hook."
        ],
        links.hook(facts.hook),
    )


# -- no worker alive -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LastWorker:
    """The newest worker heartbeat: who, when last heard (Phorge's clock), and whether it said it stopped."""

    worker_id: str
    heard: int
    stopped: str | None  # "clean", "error", or None: it went silent


@dataclass(frozen=True)
class NoWorker:
    now: int
    due: int
    oldest_due: int
    last: LastWorker | None
    shown_for_sec: int  # how far back heartbeats are kept for this


def _last_worker(last: LastWorker | None, now: int, shown_for_sec: int) -> str:
    if last is None:
        shown = "day" if shown_for_sec == 86400 else duration(shown_for_sec)
        return f"No worker has been seen in the last {shown}."
    who = f"The last worker, {quoted(last.worker_id)},"
    if last.stopped == "clean":
        return f"{who} stopped cleanly at {moment(last.heard, now)}."
    if last.stopped == "error":
        return f"{who} stopped on an error at {moment(last.heard, now)} (see its log)."
    return (
        f"{who} was last heard at {moment(last.heard, now)}, with no clean stop (killed, crashed, or cut off "
        "from Django's database)."
    )


def no_worker(facts: NoWorker, links: Links) -> Message:
    return message(
        f"No worker delivering: {count(facts.due, 'request')} due",
        [
            f"No deliver_webhooks worker is alive while {count(facts.due, 'request')} "
            f"{'is' if facts.due == 1 else 'are'} due (the oldest due since {moment(facts.oldest_due, facts.now)}, "
            f"{duration(facts.now - facts.oldest_due)}).",
            _last_worker(facts.last, facts.now, facts.shown_for_sec),
        ],
        links.dashboard(),
    )


@dataclass(frozen=True)
class NoWorkerOver:
    now: int
    since: int
    alive: tuple[str, ...]  # worker ids alive now


def no_worker_over(facts: NoWorkerOver, links: Links) -> Message:
    lasted = duration(facts.now - facts.since)
    if facts.alive:
        workers = ", ".join(quoted(worker) for worker in facts.alive[:3])
        more = f" and {len(facts.alive) - 3} more" if len(facts.alive) > 3 else ""
        return message(
            "A worker delivers again",
            [f"A deliver_webhooks worker is alive again ({workers}{more}), after {lasted} without one."],
            links.dashboard(),
        )
    return message(
        "Nothing due any more, still no worker",
        [
            f"Nothing is due any more, after {lasted}; still no deliver_webhooks worker is alive, so new requests "
            "will wait until one starts."
        ],
        links.dashboard(),
    )


# -- Phorge's own PHP worker delivering ----------------------------------------------------------------


@dataclass(frozen=True)
class PhpDelivering:
    now: int
    tasks: int | None  # HeraldWebhookWorker tasks in Phorge's queue; None when not read
    last_delivery: int | None


def php_delivering(facts: PhpDelivering, links: Links) -> Message:
    tasks = (
        f"{count(facts.tasks, 'HeraldWebhookWorker task')} in Phorge's worker queue"
        if facts.tasks
        else "no task in Phorge's worker queue now"
        if facts.tasks == 0
        else ""
    )
    last = f"the last delivered at {moment(facts.last_delivery, facts.now)}" if facts.last_delivery else ""
    seen = "; ".join(part for part in (tasks, last) if part)
    return message(
        "Phorge's PHP worker delivers webhooks too",
        [
            "Phorge's own PHP worker (HeraldWebhookWorker) is delivering webhooks beside this service"
            + (f": {seen}." if seen else "."),
            "Requests with a PHP task are left to it; finish the handover (docs/operate/handover.md) so that this "
            "service delivers them all.",
        ],
        links.dashboard(),
    )


def php_delivering_over(now: int, clear_sec: int, last_delivery: int | None, links: Links) -> Message:
    last = f" (the last at {moment(last_delivery, now)})" if last_delivery else ""
    return message(
        "Phorge's PHP worker no longer delivers webhooks",
        [
            f"Phorge's PHP worker has delivered no webhook for at least {duration(clear_sec)}{last}, and has no "
            "HeraldWebhookWorker task queued."
        ],
        links.dashboard(),
    )


# -- delivery stalled, herald unreachable --------------------------------------------------------------


@dataclass(frozen=True)
class Stalled:
    now: int
    age: int
    threshold: int
    due: int


def stalled(facts: Stalled, links: Links) -> Message:
    return message(
        f"Delivery stalled: oldest due request waiting {duration(facts.age)}",
        [
            f"Delivery is stalled: the oldest due request has waited {duration(facts.age)} (since "
            f"{moment(facts.now - facts.age, facts.now)}; stalled beyond {duration(facts.threshold)}); "
            f"{count(facts.due, 'request')} due."
        ],
        links.dashboard(),
    )


def stalled_over(now: int, since: int, age: int | None, links: Links) -> Message:
    waits = "nothing is due" if age is None else f"the oldest due request now waits {duration(age)}"
    return message(
        "Delivery no longer stalled",
        [f"Delivery is no longer stalled: {waits}, after {duration(now - since)}."],
        links.dashboard(),
    )


def database_down(now: int, error: str, links: Links) -> Message:
    return message(
        "Phorge's herald database unreachable",
        [
            f"Phorge's herald database does not answer the alert watcher ({error}) since {moment(now, now)}: "
            "nothing is delivered, and no other condition can be checked."
        ],
        links.dashboard(),
    )


def database_up(now: int, since: int, links: Links) -> Message:
    return message(
        "Phorge's herald database answers again",
        [f"Phorge's herald database answers the alert watcher again, after {duration(now - since)}."],
        links.dashboard(),
    )


# -- an incident task in Phorge (Remarkup) -------------------------------------------------------------

_PERCENTS = re.compile("%{3,}")
_SAFE_LINK = re.compile(r"^https?://[A-Za-z0-9.\-]+(:[0-9]+)?(/[A-Za-z0-9._~%/\-]*)?$")


def unmarked(text: str) -> str:
    """A notification's text without the ALERT / RECOVERED / LOST marker Message.text() put before it."""
    for marker in MARKERS.values():
        head = f"{marker:<10} "
        if text.startswith(head):
            return text[len(head) :]
    return text


def literal(text: str) -> str:
    """Text as a Remarkup literal block: Phorge shows it as it is, with no rule applied to it (no mention,
    object reference, project tag, link or formatting), and it cannot end the block early (every %%% in it
    is broken by the word joiner)."""
    shown = _PERCENTS.sub(lambda run: JOINER.join(run.group()), text.strip("\n").replace("\r", " "))
    return f"%%%{shown}%%%"


def _link_lines(links: Sequence[str]) -> list[str]:
    # Our own addresses (GORGE_ALERT_SITE_URL, Phorge's base URI) with PHIDs and ids of Phorge's in them:
    # outside the literal block (so Phorge makes them links) only when they are nothing but an address.
    return [link if _SAFE_LINK.match(link) else literal(link) for link in links]


def incident_marker(key: str, episode: int) -> str:
    """A line that names the incident in its task, so that a task whose creation answer was lost is found."""
    return literal(f"gorge-webhook incident {plain(key, 200)} episode {episode}")


def task_opened(subject: str, body: str, key: str, episode: int) -> Message:
    """The task of a condition that started: the alert's subject as its title, its words (Phorge's text in
    them) in a literal block, the links below."""
    text, links = split_links(body)
    opening = (
        "gorge-webhook opened this task when this alert started. It comments here when the alert changes "
        "materially, and resolves the task when it ends; close the task yourself and it is left alone until "
        "the alert ends."
    )
    parts = [opening, literal(text), "\n".join(_link_lines(links)), incident_marker(key, episode)]
    return Message(subject.strip()[:255], "\n\n".join(part for part in parts if part))


def task_changed(body: str, why: str) -> str:
    text, _links = split_links(body)
    return f"The alert changed ({why}). Now:\n\n{literal(text)}"


def task_ended(body: str) -> str:
    text, _links = split_links(unmarked(body))
    return f"The alert ended, so gorge-webhook resolves this task:\n\n{literal(text)}"
