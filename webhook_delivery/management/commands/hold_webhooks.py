"""`manage.py hold_webhooks`: stop delivering hooks' requests without losing them, and start again.

A held hook's requests stay `queued` in Phorge, untouched: no worker claims them, and after the release each
goes out once. Running workers read the holds at each heartbeat (5 s); a hold returns once every running
worker's heartbeat says it has read it (from then on none starts a call for the hook; one already under way
finishes), or says which have not, after CONFIRM_SEC. Holds live in Django's own database (HookHold); each
hold and release is also written down as an operator's action, done by `cli` (records/actions.py), beside
those asked for from the dashboard.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from webhook_delivery.phorge.herald import utc
from webhook_delivery.records import actions, heartbeat, holds
from webhook_delivery.terminal import printable
from webhook_delivery.worker.store import Store

logger = logging.getLogger("webhook_delivery.records.holds")
CONFIRM_SEC = 15.0  # three heartbeats: a running worker that has not confirmed by then is named


class Command(BaseCommand):
    help = (
        "Hold a webhook: workers claim none of its requests, which stay queued in Phorge until --release. "
        "--list shows the holds in force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--hook",
            metavar="PHID",
            action="append",
            default=[],
            help="a hook (PHID-HWBH-...) to hold or release; repeat it for several",
        )
        parser.add_argument(
            "--no-wait", action="store_true", help="return at once, without waiting for the running workers"
        )
        parser.add_argument("--reason", default="", help=f"why, shown with the hold (at most {holds.REASON_MAX})")
        parser.add_argument("--by", metavar="WHO", help="who holds it (default: the operating system user)")
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--release", action="store_true", help="release the hook's hold: deliver again")
        action.add_argument("--list", action="store_true", help="list the holds in force")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["list"]:
                if options["hook"] or options["reason"] or options["by"]:
                    raise CommandError("--list takes no other option")
                self._list()
                return
            if not options["hook"]:
                raise CommandError("--hook PHID is required (or --list)")
            phids = list(dict.fromkeys(holds.check_hook_phid(phid) for phid in options["hook"]))
            if options["release"]:
                if options["reason"] or options["by"]:
                    raise CommandError("--release takes only --hook")
                for phid in phids:
                    self._release(phid)
                return
            reason = holds.check_reason(options["reason"])
            held_by = holds.check_held_by(holds.os_user() if options["by"] is None else options["by"])
            made = [phid for phid in phids if self._hold(phid, reason, held_by)]
            if made and not options["no_wait"]:
                self._confirm(made)
        except holds.HoldError as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            raise CommandError(
                f"Django's database (DATABASE_URL) cannot be read or written ({type(exc).__name__}): nothing was "
                "changed"
            ) from None

    def _hold(self, phid: str, reason: str, held_by: str) -> bool:
        """Hold one hook; whether this call made the hold."""
        try:
            hooks = Store().hooks()
        except DatabaseError as exc:
            raise CommandError(
                f"Phorge's database cannot be read ({type(exc).__name__}): the hook cannot be checked, nothing was held"
            ) from None
        hook = hooks.get(phid)
        if hook is None:
            raise CommandError(f"no hook {phid} in Phorge's herald_webhook: nothing was held")
        hold, created = holds.hold(phid, reason=reason, held_by=held_by)
        name = printable(hook.name)  # Phorge's text
        if not created:
            self._audit(
                actions.HOLD, phid, f"already held ({name}) {self._describe(hold)}: nothing was changed", reason
            )
            self.stdout.write(f"{phid} ({name}) is already held: {self._describe(hold)}. Nothing was changed.")
            return False
        self._audit(actions.HOLD, phid, f"held ({name}) by {held_by}", reason)
        logger.warning("hook held", extra={"event": "hold.held", "hook": phid, "held_by": held_by})
        self.stdout.write(
            f"Held {phid} ({name}): workers claim none of its requests, which stay queued in Phorge, until "
            f"`manage.py hold_webhooks --release --hook {phid}`."
        )
        return True

    def _confirm(self, phids: list[str]) -> None:
        """Wait until every running worker's heartbeat lists the holds, and say so (or who has not)."""
        since = datetime.now(UTC)
        deadline = time.monotonic() + CONFIRM_SEC
        while True:
            now = datetime.now(UTC)
            running = [worker for worker in heartbeat.workers(now) if worker.alive and not worker.beat.stopping]
            waiting = [
                worker
                for worker in running
                if not (worker.last_seen >= since and set(phids) <= set(worker.beat.hooks_held))
            ]
            if not waiting:
                break
            if time.monotonic() >= deadline:
                names = ", ".join(printable(beat.worker_id) for beat in waiting[:5])
                self.stdout.write(
                    f"{len(waiting)} running worker(s) have not confirmed the hold within {CONFIRM_SEC:.0f} s "
                    f"({names}): until they read it, they may still start calls for it. Their log says when they do."
                )
                return
            time.sleep(0.2)
        what = "the hold" if len(phids) == 1 else f"the {len(phids)} holds"
        if running:
            self.stdout.write(
                f"Every running worker ({len(running)}) has read {what}: none starts a call for it any more "
                "(a call already under way finishes)."
            )
        else:
            self.stdout.write(f"No worker is running: {what} is in force for every worker that starts.")

    def _release(self, phid: str) -> None:
        released = holds.release(phid)
        if released is None:
            self._audit(actions.RELEASE, phid, "not held: nothing was changed")
            raise CommandError(f"{phid} is not held: nothing was changed")
        self._audit(actions.RELEASE, phid, f"released (held {self._describe(released)})")
        logger.warning("hook hold released", extra={"event": "hold.released", "hook": phid})
        self.stdout.write(
            f"Released {phid} (held {self._describe(released)}): running workers deliver its due requests "
            "within seconds; those that failed wait out their retry backoff (requeue_webhooks --queued: at once)."
        )

    @staticmethod
    def _audit(kind: str, phid: str, outcome: str, reason: str = "") -> None:
        actions.record(kind, requested_from=actions.cli_origin(), hook_phid=phid, outcome=outcome, reason=reason)

    def _list(self) -> None:
        active = holds.active_holds()
        if not active:
            self.stdout.write("No hook is held.")
            return
        for hold in active:
            fields = (hold.hook_phid, utc(int(hold.held_at.timestamp())), hold.held_by, hold.reason or "-")
            self.stdout.write("\t".join(printable(field) for field in fields))  # stored text: escaped all the same

    @staticmethod
    def _describe(hold: holds.Hold) -> str:
        text = f"by {hold.held_by} since {utc(int(hold.held_at.timestamp()))}"
        return printable(text + (f", {hold.reason}" if hold.reason else ""))
