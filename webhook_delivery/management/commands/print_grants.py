"""`manage.py print_grants`: the GRANT statements this service's database user needs (and the optional ones);
`--web`: those of the web process's own, SELECT-only user."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webhook_delivery.config import PHORGE_ALIAS
from webhook_delivery.grants import AccountError, check_host, check_user, grants_sql


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # printing SQL needs no valid runtime configuration
    help = "Print the MariaDB/MySQL GRANT statements for gorge-webhook's user, one comment per optional grant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="database user (default: the configured GORGE_WEBHOOK_MYSQL_USER/URL user)")
        parser.add_argument("--host", default="%", help="host part of the account (default: %%)")
        parser.add_argument("--namespace", help="Phorge storage namespace (default: the configured one)")
        parser.add_argument("--required-only", action="store_true", help="leave out the optional grants")
        parser.add_argument(
            "--web",
            action="store_true",
            help="for the web process's own user: SELECT only (the pages write none of Phorge's rows)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        namespace = options["namespace"] or settings.GORGE_WEBHOOK.namespace
        if options["user"] is not None:
            user, user_source = options["user"], "--user"
        else:
            user = str(settings.DATABASES[PHORGE_ALIAS].get("USER") or "gorge_webhook")
            user_source = "the user of GORGE_WEBHOOK_DATABASE_URL (or GORGE_WEBHOOK_MYSQL_USER); pass --user"
        # Each part of the account is checked here, where it comes in, and refused by name: the output is
        # piped into `mariadb -u root`, so nothing that could end a comment or a string may reach it.
        for value, source, check in ((user, user_source, check_user), (options["host"], "--host", check_host)):
            try:
                check(value)
            except AccountError as exc:
                raise CommandError(f"refusing {source}: {exc}; nothing was printed") from exc
        try:
            text = grants_sql(
                namespace, user, options["host"], optional=not options["required_only"], web=options["web"]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(text, ending="")
