"""`manage.py demo`: a thin command over webhook_delivery.demo.runner (start it with `make demo`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webhook_delivery.demo.runner import DemoError, run


class Command(BaseCommand):
    help = (
        "Deliver a handful of Phorge-shaped webhook requests on SQLite to a local signature-checking receiver, "
        "print what happened, then serve the dashboard. Recreates var/demo/; never touches MySQL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-serve", action="store_true", help="check the dashboard once, then exit")
        parser.add_argument("--port", type=int, default=8000, help="port of the dashboard (default 8000)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run(self.stdout, base_dir=settings.BASE_DIR, serve=not options["no_serve"], port=options["port"])
        except DemoError as exc:
            raise CommandError(str(exc)) from exc
