"""Django's own tables on SQLite (the embedded default): a page reading them does not hold the worker's writes
back, and a write another process holds on them does not hold delivery back (issue 39, finding 3)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.helpers import PHORGE_DB, Phorge, worker_env
from tests.support.processes import WorkerProcess, count_status, manage, seed
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

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


# Another process (a `sqlite3` shell, a backup, a migration) holds a write transaction on Django's SQLite file:
# every write there waits out SQLite's busy timeout (5 s) and fails.
HOLD_A_WRITE = """
import sqlite3, sys
held = sqlite3.connect(sys.argv[1], isolation_level=None)
held.execute("BEGIN IMMEDIATE")
held.execute("DELETE FROM delivery_status_workerheartbeat")
print("locked", flush=True)
sys.stdin.read()
held.execute("ROLLBACK")
"""


@pytest.mark.slow
def test_a_write_held_on_the_site_database_costs_delivery_nothing(
    phorge: Phorge, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    site = tmp_path / "site.sqlite3"
    url = f"sqlite:///{site}"
    manage("migrate", "--verbosity", "0", env=worker_env(DATABASE_URL=url))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_WRITE, str(site)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def said(event: str) -> int:
        return sum(1 for line in worker.lines() if line.get("event") == event)

    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with Receiver() as receiver:
            hooks = [phorge.hook(receiver.url("/h/ok"))]  # one hook: one job at a time, the loop schedules each
            seed(phorge, hooks, 1000)
            worker = workers("w", DATABASE_URL=url, GORGE_WEBHOOK_POLL_INTERVAL_MS="50").start()
            # Before: the heartbeat waited out the busy timeout on the main loop, beat after beat, and a job
            # of 32 requests went out every 5 s (1,000 in over 2.5 minutes).
            wait_for(lambda: count_status(phorge, "sent") == 1000, 120, "1,000 delivered while the write is held")
            assert holder.poll() is None, "the write was held all along"
            assert len(receiver.requests) == 1000
            wait_for(lambda: said("worker.heartbeat_unwritable") and said("attempts.unwritable"), 60, "both said")
            holder.communicate("", timeout=10)  # the write is let go
            seed(phorge, hooks[:1], 1)
            wait_for(lambda: count_status(phorge, "sent") == 1001, 30, "the next request")
            wait_for(lambda: said("worker.heartbeat_written_again"), 30, "the heartbeat written again")
            wait_for(lambda: said("attempts.written_again"), 30, "the attempt log written again")
            worker.signal(signal.SIGTERM)
            assert worker.wait(30) == 0
        events = Counter(line.get("event") for line in worker.lines())
        assert events["worker.heartbeat_unwritable"] == 1 and events["attempts.unwritable"] == 1, "each said once"
        [again] = [line for line in worker.lines() if line.get("event") == "attempts.written_again"]
        with sqlite3.connect(site) as check:
            recorded = check.execute(ATTEMPTS).fetchone()[0]
            beats = check.execute("SELECT state FROM delivery_status_workerheartbeat").fetchall()
        assert recorded + again["lost"] == 1001, "every attempt either recorded or counted as lost"
        assert again["lost"] > 0 and recorded > 0
        [(state,)] = beats
        assert '"stopped": "clean"' in state, "the last heartbeat written at the stop"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
