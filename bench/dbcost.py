"""What a worker costs Phorge's database, told apart from every other client: the worker runs as a MariaDB
user of its own with exactly the grants it needs, and MariaDB's per-user statistics (`userstat`,
information_schema.USER_STATISTICS) count its statements, the rows it read and the server CPU it took.

    with WorkerUser(database) as user:
        env = {"GORGE_WEBHOOK_DATABASE_URL": user.url}
        user.reset(); ... run the worker ...; cost = user.cost()
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from bench.common import SERVER, connect

NAME = "gwbench_worker"


@dataclass(frozen=True)
class Cost:
    statements: float
    rows_read: float
    cpu_sec: float

    def per(self, count: float) -> Cost:
        return Cost(self.statements / count, self.rows_read / count, self.cpu_sec / count)


def user_name(database: str) -> str:
    """The measured user: one per bench database, so that benches on one server keep to their own users."""
    prefix = database.removesuffix("_herald")
    return NAME if prefix == "gwbench" else f"{prefix[:60]}_worker"


class WorkerUser:
    def __init__(self, database: str) -> None:
        self.database = database
        self.name = user_name(database)
        self.password = secrets.token_hex(12)
        self._admin: Any = None
        self._was_on = False

    @property
    def url(self) -> str:
        return f"mysql://{self.name}:{self.password}@{SERVER.host}:{SERVER.port}/{self.database}"

    def _run(self, sql: str, params: Any = None) -> Any:
        with self._admin.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else None

    def __enter__(self) -> WorkerUser:
        self._admin = connect()
        self._was_on = bool(int(self._run("SELECT @@GLOBAL.userstat")[0][0]))
        self._run("SET GLOBAL userstat = 1")
        for host in ("localhost", "127.0.0.1", "%"):
            self._run(f"DROP USER IF EXISTS '{self.name}'@'{host}'")
            # The host '%' would read as a format character with parameters; the password is hex.
            self._run(f"CREATE USER '{self.name}'@'{host}' IDENTIFIED BY '{self.password}'")
            # The least privilege the service needs (scripts/grants.sql): nothing else is counted as its.
            self._run(f"GRANT SELECT ON `{self.database}`.`herald_webhook` TO '{self.name}'@'{host}'")
            self._run(f"GRANT SELECT, UPDATE ON `{self.database}`.`herald_webhookrequest` TO '{self.name}'@'{host}'")
        return self

    def reset(self) -> None:
        self._run("FLUSH USER_STATISTICS")

    def cost(self) -> Cost:
        rows = self._run(
            "SELECT SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS, ROWS_READ, CPU_TIME "
            "FROM information_schema.USER_STATISTICS WHERE USER = %s",
            (self.name,),
        )
        if not rows:
            return Cost(0, 0, 0.0)
        statements, rows_read, cpu = rows[0]
        return Cost(float(statements), float(rows_read), float(cpu))

    def __exit__(self, *exc: object) -> None:
        try:
            for host in ("localhost", "127.0.0.1", "%"):
                self._run(f"DROP USER IF EXISTS '{self.name}'@'{host}'")
            if not self._was_on:
                self._run("SET GLOBAL userstat = 0")
        finally:
            self._admin.close()
