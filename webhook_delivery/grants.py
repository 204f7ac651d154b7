"""The MariaDB/MySQL grants of the service's user (`manage.py print_grants`): the required ones and, each
under a comment saying what is lost without it, the optional read-only ones."""

from __future__ import annotations

from .phorge_lookups import OBJECT_TABLES, qualified


def _account(user: str, host: str) -> str:
    def literal(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return f"{literal(user)}@{literal(host)}"


def grants_sql(namespace: str, user: str, host: str = "%", *, optional: bool = True) -> str:
    """GRANT statements for this service's MariaDB/MySQL user, with what each optional one is for.

    Table-level grants: each table must exist (it does in any Phorge after `bin/storage upgrade`).
    """
    account = _account(user, host)
    lines = [
        f"-- MariaDB/MySQL grants for gorge-webhook (namespace {namespace!r}). Create the user first:",
        f"--   CREATE USER {account} IDENTIFIED BY '<password>';",
        "-- Required: read hooks, claim requests and write their results.",
        f"GRANT SELECT ON {qualified(namespace, 'herald', 'herald_webhook')} TO {account};",
        f"GRANT SELECT, UPDATE ON {qualified(namespace, 'herald', 'herald_webhookrequest')} TO {account};",
    ]
    if optional:
        lines += [
            "-- Optional: without it phabricator.silent, security.outbound-blacklist and phabricator.base-uri are not "
            "seen (set GORGE_WEBHOOK_SILENT and GORGE_WEBHOOK_OUTBOUND_BLACKLIST instead).",
            f"GRANT SELECT ON {qualified(namespace, 'config', 'config_entry')} TO {account};",
            "-- Optional: without these, PHP delivery still running is not detected (handover guard: unknown), and "
            "a request PHP also has a task for can be sent twice while both deliver.",
            f"GRANT SELECT ON {qualified(namespace, 'worker', 'worker_activetask')} TO {account};",
            f"GRANT SELECT ON {qualified(namespace, 'worker', 'worker_archivetask')} TO {account};",
        ]
        granted = {qualified(namespace, "herald", "herald_webhook")}
        for phid_type, tables in OBJECT_TABLES.items():
            objects = qualified(namespace, tables.object_app, tables.object_table)
            xactions = qualified(namespace, tables.xaction_app, tables.xaction_table)
            if objects in granted:
                lines.append(
                    f"-- Optional ({phid_type}): without it, {tables.label} get stored transactions, newest first."
                )
            else:
                lines.append(
                    f"-- Optional ({phid_type}): without these, requests for deleted {tables.label} are still "
                    "sent, with their stored transactions newest first."
                )
            for name in (objects, xactions):
                if name not in granted:
                    granted.add(name)
                    lines.append(f"GRANT SELECT ON {name} TO {account};")
    return "\n".join(lines) + "\n"
