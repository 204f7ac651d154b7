"""An incident task in Phorge for each episode of a condition (GORGE_ALERT_PHORGE_TOKEN, a bot's Conduit
token): opened when the condition starts, commented on when it changes materially, resolved when it ends.

The `phorge` channel is sent on by sending.py like the others (one watcher at a time holds its lease; a
thread of its own; a failure logged once, counted and retried with a growing wait), but each pass it plans
task operations instead of a digest. The plan is made in the watcher's thread (Django's database: claims and
reads), the calls to Conduit in the channel's thread (no database), and what they did is written back in the
watcher's thread (`settle`).

Once per episode, whatever the number of watchers: an episode's task is claimed by inserting its AlertTask
row (unique on the condition's key and episode), and only the watcher that inserted it (or that takes over,
by a conditional UPDATE, a claim released after a failed try or left to expire by a dead watcher) opens the
task. A create whose answer never came, or whose watcher died (Phorge may have made the task), is marked,
and the next try first looks for the task by the incident line its description ends with, among the bot's
tasks made since.

"Materially" (a comment on the task, at most every COMMENT_EVERY_SEC): the hook entered Phorge's breaker
backoff, a kind of error not told before appeared, or a count the alert is about (requests failed, due, near
collection; the stalled wait) has at least doubled since the task last told it. Everything else (a new
pass, a minute more of the same) is not.

A task someone else closed (any closed status; or a task deleted or hidden from the bot) is left alone for
the rest of the episode: its status is read (maniphest.search) before every comment and before resolving.

Conduit is called as Phorge's own client (arcanist's ConduitClient) does: a form-encoded POST to
/api/<method> with the parameters as JSON in `params`, the token inside them (`__conduit__`), never in a URL.
Every call is bounded in time and size (outbound.post) and read by jsonread. Of an answer, only what
answers.py lets through ever leaves this module (Phorge's error code when it is one of Conduit's words,
ERR-INVALID-AUTH, ...): Phorge's error texts can quote the token ("API token "api-..." is not valid."), and
a hostile endpoint can put it anywhere. A result is checked against what Phorge can answer (a task's id
fits its column, PHIDs are of their type) before anything of it is kept.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Coalesce

from .. import answers, jsonread, outbound
from ..phorge.names import ID_MAX
from ..phorge_auth.phorge import PhorgeUnknown, phorge_url
from . import messages, metrics
from .channels import ChannelError
from .config import AlertConfig
from .models import AlertCondition, AlertNotification, AlertTask

logger = logging.getLogger("webhook_delivery.alerts.watcher")

ANSWER_BYTES = 256 * 1024  # an edit's or a search's answer is a few KiB
COMMENT_EVERY_SEC = 600
OPS_PER_PASS = 8
LOOK_BACK_SEC = 120  # the clocks of Phorge and of this host may differ a little
OUT_OF_DOMAIN = "Phorge: an answer Phorge cannot give (an id or a PHID outside Phorge's domains)"
# PhabricatorPHID: "PHID-<type>-<random>", at most 64 characters (the columns that hold PHIDs).
_TASK_PHID = re.compile(r"PHID-TASK-[A-Za-z0-9]{1,54}")
_USER_PHID = re.compile(r"PHID-USER-[A-Za-z0-9]{1,54}")


class ConduitError(ChannelError):
    """Phorge answered with an error code; str() names it, never Phorge's error text."""

    def __init__(self, code: str, *, policy: bool) -> None:
        super().__init__(f"Conduit {code}" + (" (a policy refusal)" if policy else ""))
        self.code = code
        self.policy = policy


def _policy(info: object) -> bool:
    # PhabricatorPolicyFilter's exceptions: "[You Shall Not Pass: <object>] (<capability>) <rejection> // ..."
    # (or "[Access Denied: ...]" with phabricator.serious-business), raised as ERR-CONDUIT-CORE.
    return isinstance(info, str) and info.startswith(("[You Shall Not Pass", "[Access Denied"))


def address(config: AlertConfig) -> str:
    """Phorge's address for Conduit: GORGE_ALERT_PHORGE_URL, else sign-in's (GORGE_PHORGE_OAUTH_URL, else the
    base URI from the environment or Phorge's local file, never from Phorge's database)."""
    if config.phorge_url:
        return config.phorge_url
    try:
        return phorge_url()
    except PhorgeUnknown as exc:
        raise ChannelError(str(exc).replace("GORGE_PHORGE_OAUTH_URL", "GORGE_ALERT_PHORGE_URL")) from None


def call(config: AlertConfig, base: str, method: str, params: Mapping[str, Any]) -> Any:
    """One Conduit call, its result; raises ConduitError (Phorge said no) or ChannelError (no answer)."""
    form = {
        "params": json.dumps({**params, "__conduit__": {"token": config.phorge_token}}),
        "output": "json",
        "__conduit__": "1",
    }
    try:
        answer = outbound.post(
            f"{base}/api/{method}", data=form, timeout=config.channel_timeout_sec, max_bytes=ANSWER_BYTES
        )
    except outbound.OutboundError as exc:
        metrics.CONDUIT_ERRORS.labels("unreachable").inc()
        raise ChannelError(f"Phorge: {exc}") from None
    if answer.status != 200:
        metrics.CONDUIT_ERRORS.labels("http").inc()
        raise ChannelError(f"Phorge: HTTP {answer.status}")
    body = None if answer.too_large else jsonread.decode(answer.body)
    if not isinstance(body, dict) or "result" not in body or "error_code" not in body:
        metrics.CONDUIT_ERRORS.labels("not_conduit").inc()
        raise ChannelError("Phorge: not a Conduit answer" + (" (too large)" if answer.too_large else ""))
    if body["error_code"]:
        code = answers.conduit_code(body["error_code"], secrets=(config.phorge_token,))
        metrics.CONDUIT_ERRORS.labels(answers.conduit_label(code)).inc()
        raise ConduitError(code, policy=_policy(body.get("error_info")))
    return body["result"]


def check(config: AlertConfig) -> None:
    """Whether the token works (user.whoami), for `watch_webhooks --test`; raises ChannelError."""
    _me(call(config, address(config), "user.whoami", {}))


def _me(result: object) -> str:
    """The bot's PHID from user.whoami's result; raises ChannelError when it is not a user's PHID."""
    phid = result.get("phid") if isinstance(result, dict) else None
    if not isinstance(phid, str) or not _USER_PHID.fullmatch(phid):
        raise ChannelError(OUT_OF_DOMAIN)
    return phid


# -- what counts as a material change --------------------------------------------------------------------


def facts(kind: str, detail: Mapping[str, Any]) -> dict[str, Any]:
    """What a task is told of a condition, from the condition's detail, to compare with what it was told."""

    def number(name: str) -> int:
        value = detail.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    if kind == "receiver":
        error = detail.get("error")
        return {
            "failed": number("failed"),
            "backoff": bool(detail.get("backoff")),
            "errors": [error[:80]] if isinstance(error, str) and error else [],
        }
    if kind == "collection":
        return {"count": number("count")}
    if kind == "no_worker":
        return {"due": number("due")}
    if kind == "stalled":
        return {"age": number("age")}
    return {}


COUNTS = {"failed": "failed requests", "count": "requests near collection", "due": "requests due", "age": "seconds"}


def material(told: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """Why the task should hear of the condition again (our words only), or None: not a material change."""
    if now.get("backoff") and not told.get("backoff"):
        return "the hook is now in Phorge's breaker backoff"
    known = set(told.get("errors") or [])
    if any(error not in known for error in now.get("errors") or []):
        return "a kind of error not told before"
    for name, label in COUNTS.items():
        before, after = told.get(name), now.get(name)
        if isinstance(before, int) and isinstance(after, int) and after >= 2 * max(before, 1):
            return f"{label}: {before} when last told, {after} now"
    return None


def merged(told: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """What the task has been told once `now` is told too."""
    errors = list(dict.fromkeys([*(told.get("errors") or []), *(now.get("errors") or [])]))[:20]
    return {**told, **now, "backoff": bool(told.get("backoff") or now.get("backoff")), "errors": errors}


# -- one pass: plan (watcher thread), run (channel thread), settle (watcher thread) -----------------------


@dataclass
class TaskOp:
    """One thing to do in Phorge. `ids`: the notifications it carries (sent once it is done)."""

    action: str  # "open", "comment", "resolve", or "settle" (nothing to do in Phorge)
    key: str
    episode: int
    ids: tuple[int, ...] = ()
    title: str = ""
    text: str = ""  # Remarkup: the description, or the comment
    facts: dict[str, Any] = field(default_factory=dict)
    task_phid: str = ""
    look_since: int | None = None  # open: an earlier try may have made the task since then
    # What the run found:
    outcome: str = ""  # opened, found, commented, resolved, closed, refused, settled
    task_id: int | None = None
    uri: str = ""
    error: str = ""
    ambiguous: bool = False  # an open whose answer never came


class PhorgeTasks:
    """The `phorge` channel's outlet for sending.py."""

    def __init__(self, config: AlertConfig) -> None:
        self.config = config
        self.claim = timedelta(seconds=OPS_PER_PASS * 3 * config.channel_timeout_sec + 60)

    # -- plan ----------------------------------------------------------------------------------------

    def parts(self, pending: list[AlertNotification]) -> list[TaskOp]:
        now = datetime.now(UTC)
        ops: list[TaskOp] = []
        opening: set[tuple[str, int]] = set()
        rows = {
            (row.key, row.episode): row
            for row in AlertTask.objects.filter(key__in={note.key for note in pending}).filter(
                episode__in={note.episode for note in pending}
            )
        }
        conditions = {row.key: row for row in AlertCondition.objects.filter(key__in={note.key for note in pending})}
        for note in pending:
            if len(ops) >= OPS_PER_PASS:
                break
            slot = (note.key, note.episode)
            row = rows.get(slot)
            if note.transition == "entered":
                claimed = self._claim(slot, now)
                if claimed is not None:
                    condition = conditions.get(note.key)
                    current = condition is not None and condition.active and condition.episode == note.episode
                    body = condition.summary if current and condition is not None else messages.unmarked(note.text)
                    text = messages.task_opened(note.subject, body, note.key, note.episode)
                    detail = condition.detail if current and condition is not None else {}
                    ops.append(
                        TaskOp(
                            "open",
                            note.key,
                            note.episode,
                            (note.pk,),
                            title=text.subject,
                            text=text.body,
                            facts=facts(note.kind, detail if isinstance(detail, dict) else {}),
                            look_since=None if claimed.tried_at is None else int(claimed.tried_at.timestamp()),
                        )
                    )
                    opening.add(slot)
                elif row is not None and row.state != AlertTask.CREATING:
                    ops.append(TaskOp("settle", note.key, note.episode, (note.pk,)))
                # else: another watcher is opening it; the note waits for its task
            elif note.transition == "recovered" and (
                slot in opening or (row is not None and row.state == AlertTask.OPEN)
            ):
                ops.append(
                    TaskOp(
                        "resolve",
                        note.key,
                        note.episode,
                        (note.pk,),
                        text=messages.task_ended(note.text),
                        task_phid="" if row is None else row.task_phid,
                    )
                )
            elif note.transition == "recovered" and row is not None and row.state == AlertTask.CREATING:
                continue  # its task is being opened by another watcher
            else:
                # A loss (an event, never a task), or an end with no task to resolve (closed by someone,
                # or never opened): nothing to do in Phorge.
                ops.append(TaskOp("settle", note.key, note.episode, (note.pk,)))
        if len(ops) < OPS_PER_PASS:
            ops += self._changes(now, {(op.key, op.episode) for op in ops}, OPS_PER_PASS - len(ops))
        return ops

    def _claim(self, slot: tuple[str, int], now: datetime) -> AlertTask | None:
        """The episode's task row, if this watcher may open its task now (it inserted the row, or took over
        a claim that expired); None otherwise."""
        key, episode = slot
        try:
            with transaction.atomic():
                return AlertTask.objects.create(
                    key=key, episode=episode, state=AlertTask.CREATING, claimed_until=now + self.claim, created_at=now
                )
        except IntegrityError:
            pass
        claimable = AlertTask.objects.filter(key=key, episode=episode, state=AlertTask.CREATING)
        # Released by the watcher that tried (its try failed, with or without an answer: tried_at says), or
        # left to expire by one that died: that one may have made the task, so the next try looks first.
        won = claimable.filter(claimed_until__isnull=True).update(claimed_until=now + self.claim) or (
            claimable.filter(claimed_until__lt=now).update(
                claimed_until=now + self.claim, tried_at=Coalesce("tried_at", "created_at")
            )
        )
        if not won:
            return None
        return AlertTask.objects.filter(key=key, episode=episode).first()

    def _changes(self, now: datetime, busy: set[tuple[str, int]], room: int) -> list[TaskOp]:
        """Comments on the open tasks whose condition changed materially since they were last told."""
        quiet = now - timedelta(seconds=COMMENT_EVERY_SEC)
        found = []
        tasks = list(AlertTask.objects.filter(state=AlertTask.OPEN, told_at__lt=quiet).order_by("told_at")[:200])
        conditions = {
            row.key: row for row in AlertCondition.objects.filter(key__in=[task.key for task in tasks], active=True)
        }
        for task in tasks:
            condition = conditions.get(task.key)
            if (task.key, task.episode) in busy or condition is None or condition.episode != task.episode:
                continue
            told = task.told if isinstance(task.told, dict) else {}
            now_facts = facts(condition.kind, condition.detail if isinstance(condition.detail, dict) else {})
            why = material(told, now_facts)
            if why is None:
                continue
            found.append(
                TaskOp(
                    "comment",
                    task.key,
                    task.episode,
                    text=messages.task_changed(condition.summary, why),
                    facts=merged(told, now_facts),
                    task_phid=task.task_phid,
                )
            )
            if len(found) >= room:
                break
        return found

    # -- run (the channel's thread: no database) -----------------------------------------------------

    def starter(self) -> Callable[[Any], None]:
        """What the channel's thread calls for each operation of one run, in order."""
        opened: dict[tuple[str, int], str] = {}  # tasks opened earlier in the run, for their end in the same run
        return lambda op: self.send(op, opened)

    def test(self) -> None:
        check(self.config)

    def send(self, op: TaskOp, opened: dict[tuple[str, int], str]) -> None:
        """Do one operation in Phorge; raises ChannelError (the run stops there, and is tried again)."""
        if op.action == "settle":
            op.outcome = "settled"
            return
        base = address(self.config)
        if op.action == "open":
            self._open(base, op)
            opened[(op.key, op.episode)] = op.task_phid
            return
        phid = op.task_phid or opened.get((op.key, op.episode), "")
        if not phid:
            op.outcome = "closed"
            return
        op.task_phid = phid
        if self._closed(base, phid):
            op.outcome = "closed"
            return
        transactions: list[dict[str, Any]] = [{"type": "comment", "value": op.text}]
        if op.action == "resolve":
            transactions.append({"type": "status", "value": "resolved"})
        try:
            call(self.config, base, "maniphest.edit", {"objectIdentifier": phid, "transactions": transactions})
        except ConduitError as exc:
            if not exc.policy:
                raise
            op.outcome, op.error = "refused", str(exc)  # the bot may not edit this task: left alone
            return
        op.outcome = "resolved" if op.action == "resolve" else "commented"

    def _open(self, base: str, op: TaskOp) -> None:
        if op.look_since is not None and self._find(base, op):
            op.outcome = "found"
            return
        transactions: list[dict[str, Any]] = [
            {"type": "title", "value": op.title},
            {"type": "description", "value": op.text},
            {"type": "priority", "value": self.config.phorge_priority},
        ]
        if self.config.phorge_tags:
            transactions.append({"type": "projects.add", "value": list(self.config.phorge_tags)})
        try:
            result = call(self.config, base, "maniphest.edit", {"transactions": transactions})
        except ChannelError as exc:
            # Phorge's error code: nothing was made. No answer: sent, perhaps made, so the next try looks first.
            op.ambiguous = not isinstance(exc, ConduitError)
            raise
        made = result.get("object") if isinstance(result, dict) else None
        if not isinstance(made, dict) or not _task(made.get("id"), made.get("phid")):
            op.ambiguous = True  # Phorge may have made a task all the same: the next try looks for it first
            raise ChannelError(OUT_OF_DOMAIN)
        op.task_id, op.task_phid, op.uri = int(made["id"]), str(made["phid"]), f"{base}/T{int(made['id'])}"
        op.outcome = "opened"

    def _find(self, base: str, op: TaskOp) -> bool:
        """Whether an earlier try made the task after all (the bot's tasks made since, by their incident line).
        An answer that cannot be read raises ChannelError: making the task again could make a second one."""
        me = _me(call(self.config, base, "user.whoami", {}))
        since = max(0, (op.look_since or 0) - LOOK_BACK_SEC)
        result = call(
            self.config,
            base,
            "maniphest.search",
            {"constraints": {"authorPHIDs": [me], "createdStart": since}, "limit": 100},
        )
        data = result.get("data") if isinstance(result, dict) else None
        if not isinstance(data, list):
            raise ChannelError("Phorge: not a Conduit answer")
        marker = messages.incident_marker(op.key, op.episode)
        for item in data:
            fields = item.get("fields") if isinstance(item, dict) else None
            description = fields.get("description") if isinstance(fields, dict) else None
            raw = description.get("raw") if isinstance(description, dict) else None
            if isinstance(raw, str) and marker in raw:
                if not _task(item.get("id"), item.get("phid")):
                    raise ChannelError(OUT_OF_DOMAIN)
                op.task_id, op.task_phid, op.uri = int(item["id"]), str(item["phid"]), f"{base}/T{int(item['id'])}"
                return True
        return False

    def _closed(self, base: str, phid: str) -> bool:
        """Whether the task is closed (whoever closed it), or gone from the bot's sight."""
        result = call(self.config, base, "maniphest.search", {"constraints": {"phids": [phid]}, "limit": 1})
        data = result.get("data") if isinstance(result, dict) else None
        if not isinstance(data, list):
            raise ChannelError("Phorge: not a Conduit answer")
        if not data:
            return True  # deleted, or the bot may no longer see it
        fields = data[0].get("fields") if isinstance(data[0], dict) else None
        return not isinstance(fields, dict) or fields.get("dateClosed") is not None

    # -- settle (the watcher's thread) ---------------------------------------------------------------

    def settle(self, done: list[TaskOp], failed: TaskOp | None) -> None:
        now = datetime.now(UTC)
        for op in done:
            rows = AlertTask.objects.filter(key=op.key, episode=op.episode)
            if op.outcome in ("opened", "found"):
                rows.filter(state=AlertTask.CREATING).update(
                    state=AlertTask.OPEN,
                    task_id=op.task_id,
                    task_phid=op.task_phid[:64],
                    uri=op.uri[:500],
                    told=op.facts,
                    told_at=now,
                    claimed_until=None,
                )
                logger.info(
                    "alert: Phorge task T%s opened",
                    op.task_id,
                    extra={"event": "alert.task_opened", "alert": op.key, "task": f"T{op.task_id}"},
                )
            elif op.outcome == "commented":
                rows.filter(state=AlertTask.OPEN).update(told=op.facts, told_at=now)
            elif op.outcome == "resolved":
                rows.filter(state=AlertTask.OPEN).update(state=AlertTask.RESOLVED, told_at=now)
            elif op.outcome in ("closed", "refused"):
                left = rows.filter(state__in=(AlertTask.OPEN, AlertTask.CREATING)).update(state=AlertTask.CLOSED)
                if left and op.outcome == "refused":
                    logger.warning(
                        "alert: Phorge refused an edit of the alert's task: left alone for the rest of the alert",
                        extra={"event": "alert.task_refused", "alert": op.key, "error": op.error},
                    )
        if failed is not None and failed.action == "open":
            rows = AlertTask.objects.filter(key=failed.key, episode=failed.episode, state=AlertTask.CREATING)
            rows.update(claimed_until=None)  # tried again at the channel's next try, by whichever watcher
            if failed.ambiguous:
                rows.filter(tried_at__isnull=True).update(tried_at=now)


def _task(task_id: object, phid: object) -> bool:
    """Whether Phorge could have answered this task: an id of maniphest_task's `int unsigned` column, and a
    task's PHID."""
    return (
        isinstance(task_id, int)
        and not isinstance(task_id, bool)
        and 1 <= task_id <= ID_MAX
        and isinstance(phid, str)
        and _TASK_PHID.fullmatch(phid) is not None
    )
