"""MariaDB restarted under a running worker: it logs once, backs off, reconnects and finishes the queue.

The test runs its own private mariadbd (own port, own data directory): the machine's shared server is
never touched.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import MySQLdb
import pytest

from tests.support.helpers import with_event
from tests.support.mariadb_servers import PrivateServer
from tests.support.processes import WorkerProcess
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for
from webhook_delivery.phorge import seeding

pytestmark = [pytest.mark.slow, pytest.mark.database_server]
NAMESPACE = "outage"


@pytest.fixture
def private_mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    server = PrivateServer(tmp_path_factory.mktemp("outage-mariadb"), "--skip-log-bin")
    server.start()
    yield server
    server.remove()


def test_worker_survives_a_database_restart(private_mariadb: PrivateServer, tmp_path: Path) -> None:
    admin = private_mariadb.server.connect()
    cursor = admin.cursor()
    cursor.execute(f"CREATE DATABASE `{NAMESPACE}_herald` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    cursor.execute(f"USE `{NAMESPACE}_herald`")
    seeding.create_herald_tables(cursor)
    with Receiver(slow_seconds=0.25) as receiver:
        hooks = [seeding.hook_row(receiver.url(f"/h{i}/slow"), now=1, name=f"h{i}") for i in range(4)]
        seeding.insert(cursor, seeding.HOOK_TABLE, hooks)
        cursor.execute("SELECT UNIX_TIMESTAMP()")
        now = int(cursor.fetchone()[0])
        requests = [seeding.request_row(hooks[i % 4]["phid"], '{"retry":"forever"}', now=now) for i in range(60)]
        seeding.insert(cursor, seeding.REQUEST_TABLE, requests)
        objects = [row["objectPHID"] for row in requests]
        admin.close()
        worker = WorkerProcess(
            tmp_path,
            "outage",
            "--max-concurrent",
            "4",
            "--poll-interval-ms",
            "50",
            GORGE_WEBHOOK_DATABASE_URL=private_mariadb.server.url(f"{NAMESPACE}_herald"),
            GORGE_WEBHOOK_CLAIM_LEASE_SEC="40",
            GORGE_WEBHOOK_DELIVERY_TIMEOUT="3",
        ).start()

        def sent() -> int:
            try:
                connection = private_mariadb.server.connect(f"{NAMESPACE}_herald")
            except MySQLdb.OperationalError:
                return -1
            with connection:
                check = connection.cursor()
                check.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'sent'")
                return int(check.fetchone()[0])

        wait_for(lambda: sent() >= 12, 30, "a first part of the queue")
        private_mariadb.stop()
        time.sleep(3)
        assert worker.proc is not None and worker.proc.poll() is None  # still running, not crashed
        private_mariadb.start()
        wait_for(lambda: sent() == 60, 90, "the rest of the queue after the restart")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        answered = Counter(r.object_phid for r in receiver.requests if r.answered_at)
    assert answered == Counter(objects)
    connection = private_mariadb.server.connect(f"{NAMESPACE}_herald")
    check = connection.cursor()
    check.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE status <> 'sent'")
    assert check.fetchone()[0] == 0
    connection.close()
    lines = worker.lines()
    assert len(with_event(lines, "database.lost")) == 1
    assert with_event(lines, "database.back")
