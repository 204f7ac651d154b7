"""The MariaDB/MySQL grants of the service's user (`manage.py print_grants`): the required ones and, each
under a comment saying what is lost without it, the optional read-only ones.

The account is checked before any of it is written: the output is meant to be piped into `mariadb -u root`,
so a user or host that could end a comment line or a string literal is refused, never escaped into SQL.
"""

from __future__ import annotations

import re
import unicodedata

from .phorge.databases import qualified
from .phorge.objects import OBJECT_TABLES

USER_MAX_CHARS = 128  # MariaDB 10.6+ (mysql.global_priv); MySQL allows 32, and says so itself
HOST_MAX_CHARS = 255
HOST_RE = re.compile(r"[A-Za-z0-9._%:/\-]+")  # names, IPv4/IPv6 addresses, netmasks and the % and _ wildcards


class AccountError(ValueError):
    """A user or host that cannot be written into the grants safely (or that no MariaDB account can have)."""


def check_user(user: str) -> str:
    """The MariaDB account user name, or AccountError saying why it is refused."""
    if not user:
        raise AccountError("the user name is empty (an anonymous account is never what gorge-webhook needs)")
    if len(user) > USER_MAX_CHARS:
        raise AccountError(f"the user name is {len(user)} characters long, MariaDB allows at most {USER_MAX_CHARS}")
    for char in user:
        if unicodedata.category(char)[0] == "C" or unicodedata.category(char) in {"Zl", "Zp"}:
            raise AccountError(
                f"the user name contains the control character {char!r} (U+{ord(char):04X}); "
                "MariaDB account names cannot hold control characters"
            )
    return user


def check_host(host: str) -> str:
    """The host part of the account (a name, an address, a netmask or a % / _ pattern), or AccountError."""
    if not host:
        raise AccountError("the host is empty (use % for any host)")
    if len(host) > HOST_MAX_CHARS:
        raise AccountError(f"the host is {len(host)} characters long, MariaDB allows at most {HOST_MAX_CHARS}")
    if not HOST_RE.fullmatch(host):
        bad = next(char for char in host if not HOST_RE.fullmatch(char))
        raise AccountError(
            f"the host contains {bad!r}: expected a host name, an IP address or netmask, or a pattern "
            "with % and _ (letters, digits and . - : / % _ only)"
        )
    return host


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _account(user: str, host: str) -> str:
    return f"{_literal(check_user(user))}@{_literal(check_host(host))}"


def grants_sql(namespace: str, user: str, host: str = "%", *, optional: bool = True, web: bool = False) -> str:
    """GRANT statements for this service's MariaDB/MySQL user, with what each optional one is for; with `web`,
    for the web process's own user: SELECT only (the pages write none of Phorge's rows).

    Table-level grants: each table must exist (it does in any Phorge after `bin/storage upgrade`).
    Raises ValueError for an invalid namespace and AccountError (a ValueError) for a refused user or host.
    """
    qualified(namespace, "herald", "herald_webhook")  # checks the namespace before it is written anywhere
    account = _account(user, host)
    lines = [
        f"-- MariaDB/MySQL grants for gorge-webhook (namespace '{namespace}'). Create the user first:",
        f"--   CREATE USER {account} IDENTIFIED BY '<password>';",
    ]
    if "\\" in user + host or "'" in user + host:
        # The quotes are escaped with backslashes; under NO_BACKSLASH_ESCAPES they would end the string.
        lines += [
            "-- The account holds a quote or a backslash, escaped with backslashes: make sure they are read so.",
            "SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '');",
        ]
    if web:
        lines += [
            "-- Required for the web process (dashboard, admin, JSON, probes): read hooks and requests. It writes none",
            "-- of Phorge's rows: its actions (hold, release, requeue, retry now) go to a worker through Django's",
            "-- database (DATABASE_URL), and the workers keep their own user, with UPDATE.",
            f"GRANT SELECT ON {qualified(namespace, 'herald', 'herald_webhook')} TO {account};",
            f"GRANT SELECT ON {qualified(namespace, 'herald', 'herald_webhookrequest')} TO {account};",
        ]
    else:
        lines += [
            "-- Required: read hooks, claim requests and write their results.",
            f"GRANT SELECT ON {qualified(namespace, 'herald', 'herald_webhook')} TO {account};",
            f"GRANT SELECT, UPDATE ON {qualified(namespace, 'herald', 'herald_webhookrequest')} TO {account};",
        ]
    if optional:
        lines += [
            "-- Optional: without it a partitioned Phorge (bin/storage partition) is not recognised, and objects of "
            "applications on other masters are looked up in their empty copies here and failed as deleted.",
            f"GRANT SELECT ON {qualified(namespace, 'meta_data', 'hoststate')} TO {account};",
            "-- Optional: without it, values an older install left in Phorge's config database are not seen. "
            "phabricator.silent, security.outbound-blacklist, phabricator.base-uri, phd.garbage-collection and "
            "gorge.webhook.uri come from conf/local/local.json, where bin/config set writes them, read without any "
            "grant (GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG).",
            f"GRANT SELECT ON {qualified(namespace, 'config', 'config_entry')} TO {account};",
            "-- Optional: without these, PHP delivery still running is not detected (handover guard: unknown), and "
            "a request PHP also has a task for can be sent twice while both deliver.",
            f"GRANT SELECT ON {qualified(namespace, 'worker', 'worker_activetask')} TO {account};",
            f"GRANT SELECT ON {qualified(namespace, 'worker', 'worker_archivetask')} TO {account};",
        ]
        lines.append(
            "-- The object tables below also give the objects their names on the pages and in the admin (T123, "
            "D45, ...); a commit's name needs the repository table (REPO) too."
        )
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
