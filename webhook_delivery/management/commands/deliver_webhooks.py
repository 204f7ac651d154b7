"""`manage.py deliver_webhooks`: a thin command over webhook_delivery.worker.loop.Worker."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webhook_delivery.management.options import max_concurrent, poll_interval_ms, port
from webhook_delivery.sidetasks import SideTask
from webhook_delivery.version import VERSION

# --once exits with these when it could deliver nothing for a reason an operator must fix (docs/operate/handover.md).
EXIT_PAUSED = 3  # Phorge's silent mode unknown: its settings are not given, or cannot be read
EXIT_DATABASE = 4  # Phorge's herald database did not answer
EXIT_SIDE_TASK = 5  # the alert watcher (--watch) kept dying: given up, the worker stopped (sidetasks.py)


class Command(BaseCommand):
    help = "Deliver Phorge's queued webhook requests (herald_webhookrequest) like Phorge's PHP worker."
    # This service's own checks only: the URL checks would import every page, the admin and its forms
    # into a process that serves none of them.
    requires_system_checks = ["gorge"]

    def get_version(self) -> str:
        """What `--version` prints: this tree's version (Django's own is in `manage.py version`)."""
        return VERSION

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="deliver everything due now, then exit")
        parser.add_argument("--max-concurrent", type=max_concurrent, help="deliveries in flight per process")
        parser.add_argument("--poll-interval-ms", type=poll_interval_ms, help="idle poll period in milliseconds")
        parser.add_argument("--metrics-port", type=port, help="serve Prometheus metrics on this port")
        # All interfaces by default: Prometheus scrapes containers from outside. Metrics hold no secrets.
        parser.add_argument("--metrics-addr", default="0.0.0.0", help="address for --metrics-port")  # noqa: S104
        parser.add_argument(
            "--watch",
            action="store_true",
            help="also run the alert watcher (watch_webhooks) in this process; GORGE_ALERT_IN_WORKER=true does too",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = int(options["verbosity"])
        if verbosity == 0:
            logging.getLogger().setLevel(logging.WARNING)
        elif verbosity >= 2:
            logging.getLogger().setLevel(logging.DEBUG)
        from webhook_delivery.worker.loop import build_worker

        worker = build_worker(
            settings.GORGE_WEBHOOK,
            max_concurrent=options["max_concurrent"],
            poll_interval_ms=options["poll_interval_ms"],
            once=options["once"],
        )
        restore = worker.install_signal_handlers()  # before anything can see us up and send SIGTERM
        watcher: SideTask | None = None
        if (options["watch"] or settings.GORGE_ALERT.in_worker) and not options["once"]:
            from webhook_delivery.alerts.watcher import Watcher

            # A thread of its own with its own connections: notifications never wait on deliveries, nor
            # deliveries on a channel; several workers watching still notify each condition once.
            watcher = SideTask("alert-watcher", lambda stop: Watcher().run_forever(stop), on_give_up=worker.stop)
            watcher.start()
        keeper = None
        if not options["once"]:
            from webhook_delivery.worker.tally_keeper import TallyKeeper

            # The counts the pages show, refreshed by one worker at a time beside the deliveries.
            keeper = TallyKeeper(settings.GORGE_WEBHOOK)
            keeper.start()
        try:
            if options["metrics_port"]:
                from prometheus_client import start_http_server

                start_http_server(options["metrics_port"], addr=options["metrics_addr"])
            worker.run(handle_signals=False)
            if watcher is not None and watcher.given_up:
                raise CommandError("the alert watcher kept dying (see side_task.gave_up)", returncode=EXIT_SIDE_TASK)
            if options["once"]:
                for line in worker.summary():
                    self.stdout.write(line)
                if (why := worker.blocked()) is not None:
                    raise CommandError(why, returncode=EXIT_PAUSED if worker.paused is not None else EXIT_DATABASE)
        finally:
            if keeper is not None:
                keeper.stop()
            if watcher is not None:
                watcher.stop()
            restore()
