"""`manage.py watch_webhooks`: the alert watcher (see webhook_delivery/alerts/watcher.py)."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webhook_delivery.alerts.config import PHORGE_CHANNEL
from webhook_delivery.alerts.watcher import Watcher
from webhook_delivery.management.options import port


class Command(BaseCommand):
    help = (
        "Watch Phorge's webhook queue and tell someone (e-mail, a chat webhook, Apprise URLs, a task in Phorge) "
        "when a receiver breaks, delivery stalls, or requests near (or lost to) Phorge's 7-day collection; each "
        "condition once when it starts and once when it ends, however many watchers run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="one pass, then exit 0 (for a cron or systemd timer)")
        parser.add_argument(
            "--test",
            action="store_true",
            help="send a test message to every configured channel (the phorge channel: check its token); exit 0 "
            "if all worked, else name each that failed",
        )
        parser.add_argument("--metrics-port", type=port, help="serve Prometheus metrics on this port")
        # As deliver_webhooks: all interfaces by default (Prometheus scrapes containers from outside), and an
        # address of the operator's choice otherwise. Metrics hold no secrets.
        parser.add_argument("--metrics-addr", default="0.0.0.0", help="address for --metrics-port")  # noqa: S104

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.GORGE_CONFIG_ERRORS:
            raise CommandError("; ".join(str(error) for error in settings.GORGE_CONFIG_ERRORS))
        config = settings.GORGE_ALERT
        watcher = Watcher(config)
        if options["test"]:
            if not watcher.channels.names:
                raise CommandError(
                    "no alert channel configured (GORGE_ALERT_EMAIL_TO, GORGE_ALERT_WEBHOOK_URL, GORGE_ALERT_URLS, "
                    "GORGE_ALERT_PHORGE_TOKEN)"
                )
            failed = False
            for channel, error in watcher.send_test().items():
                if error is None:
                    self.stdout.write(f"{channel}: {'token accepted' if channel == PHORGE_CHANNEL else 'sent'}")
                else:
                    failed = True
                    self.stdout.write(f"{channel}: FAILED ({error})")
            if failed:
                raise CommandError("a test message could not be sent", returncode=1)
            return
        if not watcher.channels.names:
            self.stderr.write("warning: no alert channel configured: conditions are recorded, nobody is told")
        if options["once"]:
            result = watcher.tick()
            self.stdout.write(
                f"entered {len(result.entered)}, recovered {len(result.recovered)}, lost {result.lost}, "
                f"sent {sum(result.sent.values())}, failed channels {','.join(sorted(result.failed)) or 'none'}"
            )
            return
        if options["metrics_port"]:
            from prometheus_client import start_http_server

            start_http_server(options["metrics_port"], addr=options["metrics_addr"])
        stop = threading.Event()

        def stopping(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        watcher.run_forever(stop)
