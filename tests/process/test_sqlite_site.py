"""Django's own tables on SQLite (the embedded default): a page reading them does not hold the worker's writes back."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from tests.support.helpers import PHORGE_DB, Phorge, worker_env
from tests.support.processes import WorkerProcess, count_status, manage, seed
from tests.support.receiver import Receiver

pytestmark = [PHORGE_DB]

ATTEMPTS = "SELECT COUNT(*) FROM delivery_status_deliveryattempt"


def test_the_attempt_log_is_written_while_a_page_holds_a_read_open(
    phorge: Phorge, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    site = tmp_path / "site.sqlite3"
    url = f"sqlite:///{site}"
    manage("migrate", "--verbosity", "0", env=worker_env(DATABASE_URL=url))
    page = sqlite3.connect(site, isolation_level=None)
    try:
        assert page.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        page.execute("BEGIN")
        assert page.execute(ATTEMPTS).fetchone() == (0,)  # a read in progress, as a dashboard page makes
        with Receiver() as receiver:
            hook = phorge.hook(receiver.url("/ok"))
            seed(phorge, [hook], 3)
            worker = workers("w", "--once", DATABASE_URL=url).start()
            assert worker.wait(60) == 0
        # With a rollback journal the writer waits for the read to end, then gives its records up.
        events = [line.get("event") for line in worker.lines()]
        assert "attempts.unwritable" not in events and "attempts.written_again" not in events
        assert count_status(phorge, "sent") == 3
        assert page.execute(ATTEMPTS).fetchone() == (0,)  # the page's read still sees what it began with
        page.execute("COMMIT")
        assert page.execute(ATTEMPTS).fetchone() == (3,)
    finally:
        page.close()


def test_an_operators_own_sqlite_init_command_replaces_the_write_ahead_log(tmp_path: Path) -> None:
    site = tmp_path / "site.sqlite3"
    url = f"sqlite:///{site}?init_command=PRAGMA%20journal_mode%3DDELETE"
    manage("migrate", "--verbosity", "0", env=worker_env(DATABASE_URL=url))
    with sqlite3.connect(site) as check:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("delete",)
