"""`migrate`, refusing Phorge's database.

The router already refuses every operation there, but Django's migration recorder would still create its
`django_migrations` table in the target database (Django ticket #27790): never in Phorge's.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate

from webhook_delivery.config import PHORGE_ALIAS


class Command(DjangoMigrate):
    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("database") == PHORGE_ALIAS:
            raise CommandError(
                "Phorge owns the herald database: this project never migrates it. "
                "Run migrate without --database (Django's own tables only)."
            )
        super().handle(*args, **options)
