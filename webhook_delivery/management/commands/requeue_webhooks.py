"""`manage.py requeue_webhooks`: failed requests back to the queue, a thin command over requeue.Requeue; with
`--queued`, Retry now: the queued requests that wait on their retry backoff (a receiver's outage leaves
Herald's `retry=forever` requests so) made due at once, over retry_now.RetryNow, writing no row of Phorge's.
Each run that changes something (not a dry run) is written down as an operator's action of each hook, done
by `cli` (records/actions.py), beside those asked for from the dashboard."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from webhook_delivery.phorge.config import PhorgeSettings
from webhook_delivery.phorge.databases import Masters, MasterUnavailable, herald_connection
from webhook_delivery.phorge.herald import utc
from webhook_delivery.phorge.objects import PhorgeObjects
from webhook_delivery.records import actions
from webhook_delivery.records.notices import announce
from webhook_delivery.requeue_rules import CAP_PER_ACTION, ErrorFilter, RequeueError, parse_when
from webhook_delivery.terminal import printable
from webhook_delivery.worker.loop import HEARTBEAT_SEC
from webhook_delivery.worker.requeue import Applied, Plan, Requeue
from webhook_delivery.worker.retry_now import RetryNow, said
from webhook_delivery.worker.store import Store

logger = logging.getLogger("webhook_delivery.worker.requeue")

CONFIRM_ABOVE = CAP_PER_ACTION  # the dashboard requeues at most this many in one action
LISTED = 200


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _when(option: str, value: str | None, now: int) -> int | None:
    if value is None:
        return None
    try:
        return parse_when(value, now)
    except RequeueError as exc:
        raise RequeueError(f"{option} {exc}") from None


class Command(BaseCommand):
    help = (
        "Put failed webhook requests back in the queue, selected by hook, by when they failed and by error. "
        "Try --dry-run first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hook", action="append", default=[], metavar="PHID", help="only this hook (repeatable)")
        parser.add_argument("--since", metavar="WHEN", help="failed at or after: 09:00, 2026-12-01T09:00, 2h (UTC)")
        parser.add_argument("--until", metavar="WHEN", help="failed at or before (same forms as --since)")
        parser.add_argument(
            "--error",
            action="append",
            default=[],
            metavar="KIND",
            help="only this error (repeatable): timeout, http, http/503, hook/uri ...",
        )
        parser.add_argument(
            "--queued",
            action="store_true",
            help="retry now: the queued requests waiting on their retry backoff (after an outage) due at once",
        )
        parser.add_argument("--dry-run", action="store_true", help="list what would be requeued; change nothing")
        parser.add_argument("--yes", action="store_true", help=f"do not ask, even above {CONFIRM_ABOVE} requests")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["queued"]:
            if options["since"] or options["until"] or options["error"]:
                raise CommandError("--since, --until and --error select failed requests: --queued takes --hook only")
            self._retry_now(options["hook"], dry_run=options["dry_run"])
            return
        try:
            errors = [ErrorFilter.parse(value) for value in options["error"]]
            store = Store()
            now = store.db_now()
            since = _when("--since", options["since"], now)
            until = _when("--until", options["until"], now)
            config = settings.GORGE_WEBHOOK
            # Each application on its own master (GORGE_WEBHOOK_CLUSTER_DATABASES), as the worker reads them.
            masters = Masters.single(config.namespace, herald_connection, configured=config.cluster)
            retention = PhorgeSettings(config, masters=masters).current().retention.value
            requeue = Requeue(store, retention, PhorgeObjects(config.namespace, masters=masters))
            plan = requeue.plan(options["hook"], since=since, until=until, errors=errors)
        except RequeueError as exc:  # may name a hook: its name is Phorge's text, escaped
            raise CommandError(printable(str(exc))) from None
        except MasterUnavailable as exc:
            raise CommandError(f"{exc}: nothing was changed") from None
        except DatabaseError as exc:
            raise CommandError(
                f"Phorge's database cannot be read ({type(exc).__name__}): nothing was changed"
            ) from None
        self._list(plan)
        count = len(plan.selected)
        if options["dry_run"] or not count:
            self.stdout.write(f"{'Would requeue' if count else 'Nothing to requeue:'} {self._summary(plan)}")
            if not options["dry_run"]:
                self._audit(options, plan, None)
            return
        self.stdout.write(f"Selected {self._summary(plan)}")
        if count > CONFIRM_ABOVE and not options["yes"]:
            self._confirm(count)
        try:
            applied = requeue.apply(plan)
        except DatabaseError as exc:
            raise CommandError(
                f"Phorge's database failed while requeueing ({type(exc).__name__}): run again to finish "
                "(requests already requeued are not selected twice)"
            ) from None
        logger.warning(
            "failed requests put back in the queue",
            extra={
                "event": "requeue.requeued",
                "requeued": len(applied.requeued),
                "changed_meanwhile": applied.changed,
                "hooks": len(plan.hooks),
            },
        )
        self._audit(options, plan, applied)
        self.stdout.write(f"Requeued {_plural(len(applied.requeued), 'request')}.")
        if applied.changed:
            self.stdout.write(f"{applied.changed} changed since they were read and were left as they are.")
        if applied.requeued and not announce(plan.hooks):
            self.stdout.write(
                "Running workers could not be told (Django's database): they find these requests at their next "
                "sweep, within 10 minutes."
            )

    def _audit(self, options: dict[str, Any], plan: Plan, applied: Applied | None) -> None:
        """One done action per hook named (or per hook requeued; `every hook` when none was named or found)."""
        requeued: dict[str, int] = {}
        for candidate in [] if applied is None else applied.requeued:
            requeued[candidate.row.webhook_phid] = requeued.get(candidate.row.webhook_phid, 0) + 1
        selected: dict[str, int] = {}
        for candidate in plan.selected:
            selected[candidate.row.webhook_phid] = selected.get(candidate.row.webhook_phid, 0) + 1
        phids = list(dict.fromkeys(options["hook"])) or sorted(selected) or [""]
        choices = {
            "since": plan.since or None,
            "until": plan.until,
            "errors": [str(ErrorFilter.parse(value)) for value in options["error"]],
        }
        left = "; ".join(f"left failed: {count} {reason}" for reason, count in sorted(plan.refused.items()))
        try:
            for phid in phids:
                done = requeued.get(phid, 0) if phid else sum(requeued.values())
                outcome = f"requeued {done} of {selected.get(phid, 0) if phid else len(plan.selected)} selected"
                outcome += f"; {left}" if left else ""
                actions.record(
                    actions.REQUEUE,
                    requested_from=actions.cli_origin(),
                    hook_phid=phid,
                    outcome=outcome,
                    choices=choices,
                    requeued=done,
                )
        except DatabaseError:
            self.stdout.write("The requeue could not be written down in Django's database (DATABASE_URL).")

    def _list(self, plan: Plan) -> None:
        for candidate in plan.selected[:LISTED]:
            row = candidate.row
            error = f"{candidate.error_type}/{candidate.error_code}" if candidate.error_type else "-"
            fields = (str(row.id), row.phid, utc(candidate.failed_at), error, candidate.hook_name)
            self.stdout.write("\t".join(printable(field) for field in fields))  # Phorge's text: escaped
        if len(plan.selected) > LISTED:
            self.stdout.write(f"... and {len(plan.selected) - LISTED} more")

    def _summary(self, plan: Plan) -> str:
        text = f"{_plural(len(plan.selected), 'failed request')} of {_plural(len(plan.hooks), 'hook')}"
        text += f", failed between {utc(plan.since) or 'the start'} and {utc(plan.until)}."
        for reason, refused in sorted(plan.refused.items()):
            text += f"\nLeft failed: {refused} ({reason})."
        return text

    def _retry_now(self, hook_phids: list[str], *, dry_run: bool) -> None:
        config = settings.GORGE_WEBHOOK
        try:
            store = Store()
            hooks = Requeue(store, None).hooks_named(hook_phids)
            now = store.db_now()
            retry_now = RetryNow(store, config)
            found = [retry_now.waiting(hook, now=now) for hook in hooks if hook.status != "disabled" and hook.hmac_key]
        except RequeueError as exc:
            raise CommandError(printable(str(exc))) from None
        except DatabaseError as exc:
            raise CommandError(
                f"Phorge's database cannot be read ({type(exc).__name__}): nothing was changed"
            ) from None
        found = [waiting for waiting in found if waiting.rows]
        listed = 0
        for waiting in found:
            for row in waiting.rows[: max(0, LISTED - listed)]:
                fields = (str(row.id), row.phid, utc(row.last_epoch), utc(row.last_epoch + config.retry_backoff_sec))
                self.stdout.write("\t".join(printable(field) for field in (*fields, waiting.hook.name)))
            listed += len(waiting.rows)
        total = sum(len(waiting.rows) for waiting in found)
        if listed > LISTED:
            self.stdout.write(f"... and {listed - LISTED} more")
        summary = (
            f"{_plural(total, 'queued request')} of {_plural(len(found), 'hook')} waiting on their retry backoff "
            f"({config.retry_backoff_sec} s after each failed attempt), failed up to {utc(now)}."
        )
        for waiting in found:
            if waiting.breaker_until is not None:
                summary += (
                    f"\nThe breaker of {printable(waiting.hook.name)} is open until {utc(waiting.breaker_until)}: "
                    "its requests go then (Retry now does not close a breaker)."
                )
        if dry_run or not found:
            self.stdout.write(f"{'Would make due at once:' if found else 'Nothing waits:'} {summary}")
            return
        try:
            for waiting in found:
                retry_now.order(waiting, asked_by=actions.CLI)
                actions.record(
                    actions.RETRY,
                    requested_from=actions.cli_origin(),
                    hook_phid=waiting.hook.phid,
                    outcome=said(waiting, config, name=f" ({printable(waiting.hook.name)})"),
                    choices={"failed_up_to": now},
                    requeued=len(waiting.rows),
                )
        except DatabaseError as exc:
            raise CommandError(
                f"Django's database cannot be written ({type(exc).__name__}): the workers cannot be told, run again"
            ) from None
        logger.warning(
            "queued requests made due at once (retry now)",
            extra={"event": "requeue.retry_now", "requests": total, "hooks": len(found)},
        )
        self.stdout.write(
            f"Made due at once: {summary}\nRunning workers read this within {HEARTBEAT_SEC:g} s (their next "
            "heartbeat) and send them one at a time per hook; no row of Phorge's was changed."
        )

    def _confirm(self, count: int) -> None:
        question = f"Requeue {count} requests? They will be delivered again at once. [y/N] "
        if not sys.stdin.isatty():
            raise CommandError(
                f"{count} requests match, more than {CONFIRM_ABOVE}: check them with --dry-run, then run again "
                "with --yes"
            )
        self.stdout.write(question, ending="")
        if input().strip().lower() not in ("y", "yes"):
            raise CommandError("nothing was changed")
