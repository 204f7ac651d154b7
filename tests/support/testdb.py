"""The MariaDB server of the tests and the bench, from one variable: GORGE_TEST_DATABASE_URL,
`mysql://USER[:PASS]@HOST[:PORT]`, default `mysql://root@127.0.0.1:3306` (scripts/with-test-db.sh sets it
when it starts a private server). Standard library and mysqlclient only, so that the bench and the test
settings can use it without Django.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import MySQLdb

DEFAULT_URL = "mysql://root@127.0.0.1:3306"


@dataclass(frozen=True)
class Server:
    """Where the throwaway databases go, and as whom (that user may create and drop databases)."""

    host: str
    port: int
    user: str
    password: str

    def url(self, database: str = "") -> str:
        """The server as a database URL (GORGE_WEBHOOK_DATABASE_URL's form), naming `database` if given."""
        auth = quote(self.user, safe="") + (f":{quote(self.password, safe='')}" if self.password else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"mysql://{auth}@{host}:{self.port}/{database}"

    def connect(self, database: str | None = None, **options: Any) -> Any:
        """An autocommit utf8mb4 admin connection (MySQLdb.OperationalError when nothing answers)."""
        return MySQLdb.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database or "",
            charset="utf8mb4",
            autocommit=True,
            **options,
        )


def server(environ: Mapping[str, str] = os.environ) -> Server:
    """The test server the environment names."""
    url = urlsplit(environ.get("GORGE_TEST_DATABASE_URL") or DEFAULT_URL)
    return Server(
        host=url.hostname or "127.0.0.1",
        port=url.port or 3306,
        user=unquote(url.username or "root"),
        password=unquote(url.password or ""),
    )
