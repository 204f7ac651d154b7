"""Real worker processes for the tests, and the waits and seeds they need."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.db import connections

from tests.support import ROOT
from tests.support.helpers import Phorge, mysql_admin, worker_env
from webhook_delivery.phorge import seeding


class WorkerProcess:
    """A real `manage.py deliver_webhooks` (or another long-running command) logging JSON lines to a file;
    `cwd` is the checkout it runs from (another release's tree, unpacked)."""

    command = "deliver_webhooks"

    def __init__(self, tmp: Path, name: str, *args: str, cwd: Path = ROOT, **env: str) -> None:
        self.log = tmp / f"{name}.log"
        self.args = args
        self.cwd = cwd
        self.env = worker_env(LOG_FORMAT="json", **env)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", self.command, *self.args],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def manage(
    *args: str,
    env: dict[str, str],
    ok: bool = True,
    cwd: Path = ROOT,
    timeout: float = 120,
    run_by: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """One `manage.py` command in its own process (env: `worker_env(...)`, the production settings), its
    output as text; with `ok` it must exit 0, and the tail of its output says why when it does not. `cwd` is
    the checkout it runs in; `run_by` a command that runs it (`python -c MEASURE` that reads its peak memory)."""
    done = subprocess.run(
        [*run_by, sys.executable, "manage.py", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if ok:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def seed(phorge: Phorge, hooks: list[str], count: int, *, retry: str = "forever") -> list[str]:
    """`count` queued requests spread round-robin over `hooks`, each with its own object PHID."""
    now = phorge.now()
    rows = []
    for i in range(count):
        hook = hooks[i % len(hooks)]
        properties = seeding.properties(retry=retry, triggers=[hook], flags=False)
        rows.append(seeding.request_row(hook, properties, now=now))
    with connections["phorge"].cursor() as cursor:
        seeding.insert(cursor, seeding.REQUEST_TABLE, rows)
    return [row["objectPHID"] for row in rows]


def count_status(phorge: Phorge, status: str) -> int:
    return int(phorge.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE status = %s", (status,))[0][0])


class SiteDatabase:
    """Django's own tables in a throwaway MariaDB database that real processes share with the test, as a
    deployment shares them (workers, watchers, commands): the `site` fixture, migrated once per session."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = url.rsplit("/", 1)[1]
        self.env = {"DATABASE_URL": url}

    def command(self, *args: str, ok: bool = True, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
        """`manage.py ARGS` on this database (the production settings, Phorge's test database), from the
        checkout `cwd`."""
        return manage(*args, env=worker_env(**self.env), ok=ok, cwd=cwd)

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        admin = mysql_admin(self.name)
        try:
            cursor = admin.cursor()
            cursor.execute(statement)
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            admin.close()


class WatcherProcess(WorkerProcess):
    command = "watch_webhooks"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                super().stop()
