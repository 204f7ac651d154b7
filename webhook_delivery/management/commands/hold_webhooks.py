"""`manage.py hold_webhooks`: stop delivering one hook's requests without losing them, and start again.

A held hook's requests stay `queued` in Phorge, untouched: no worker claims them (running workers see a
hold or a release within a heartbeat, 5 s), and after the release each goes out once. Holds live in
Django's own database (status.models.HookHold).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from webhook_delivery.phorge.herald import utc
from webhook_delivery.records import holds
from webhook_delivery.terminal import printable
from webhook_delivery.worker.store import Store

logger = logging.getLogger("webhook_delivery.records.holds")


class Command(BaseCommand):
    help = (
        "Hold a webhook: workers claim none of its requests, which stay queued in Phorge until --release. "
        "--list shows the holds in force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hook", metavar="PHID", help="the hook (PHID-HWBH-...) to hold or release")
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
            phid = holds.check_hook_phid(options["hook"])
            if options["release"]:
                if options["reason"] or options["by"]:
                    raise CommandError("--release takes only --hook")
                self._release(phid)
                return
            reason = holds.check_reason(options["reason"])
            held_by = holds.check_held_by(holds.os_user() if options["by"] is None else options["by"])
            self._hold(phid, reason, held_by)
        except holds.HoldError as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            raise CommandError(
                f"Django's database (DATABASE_URL) cannot be read or written ({type(exc).__name__}): nothing was "
                "changed"
            ) from None

    def _hold(self, phid: str, reason: str, held_by: str) -> None:
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
            self.stdout.write(f"{phid} ({name}) is already held: {self._describe(hold)}. Nothing was changed.")
            return
        logger.warning("hook held", extra={"hook": phid, "held_by": held_by})
        self.stdout.write(
            f"Held {phid} ({name}): workers claim none of its requests, which stay queued in Phorge, until "
            f"`manage.py hold_webhooks --release --hook {phid}`. Running workers see it within seconds."
        )

    def _release(self, phid: str) -> None:
        released = holds.release(phid)
        if released is None:
            raise CommandError(f"{phid} is not held: nothing was changed")
        logger.warning("hook hold released", extra={"hook": phid})
        self.stdout.write(
            f"Released {phid} (held {self._describe(released)}): running workers deliver its queued requests "
            "within seconds."
        )

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
