"""The web side on a real MariaDB replica (issue 22): two servers started by the suite, the second
replicating the first with MariaDB's own replication; the web process (gunicorn, production settings)
reads herald from the replica while its lag is within the bound, else from the master; the worker and the
watcher never send it a statement, and the web sends it nothing but reads.
"""

from __future__ import annotations

import html
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, Phorge, worker_env
from tests.support.mariadb_servers import PrivateServer, mariadbd
from tests.support.processes import SiteDatabase, manage
from tests.support.waiting import wait_for
from tests.support.web_process import logged_in
from webhook_delivery.phorge import seeding

pytestmark = [
    pytest.mark.slow,
    pytest.mark.database_server,
    pytest.mark.skipif(mariadbd() is None, reason="needs mariadb-server's mariadbd for the two servers"),
]

NAMESPACE = "gwreplica"
HERALD = f"{NAMESPACE}_herald"
TOKEN = "replica-t0ken"
READER = ("pages", "pages-pw")  # the web's user on the replica: reads only


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def query(connection: Any, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def replica_status(connection: Any) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW SLAVE STATUS")
        names = [column[0] for column in cursor.description]
        row = cursor.fetchone()
    return dict(zip(names, row, strict=True)) if row else {}


@dataclass
class Pair:
    master: PrivateServer
    replica: PrivateServer
    on_master: Any
    on_replica: Any

    def url(self, server: PrivateServer, user: str = "root", password: str = "") -> str:
        auth = user + (f":{password}" if password else "")
        return f"mysql://{auth}@127.0.0.1:{server.port}/{HERALD}"

    def caught_up(self) -> bool:
        status = replica_status(self.on_replica)
        master = query(self.on_master, "SELECT @@gtid_binlog_pos")[0][0]
        return (
            status.get("Slave_SQL_Running") == "Yes"
            and query(self.on_replica, "SELECT @@gtid_slave_pos")[0][0] == master
        )


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    master = PrivateServer(
        tmp_path_factory.mktemp("source"), "--log-bin=source-bin", "--server-id=1", "--binlog-format=ROW"
    )
    replica = PrivateServer(tmp_path_factory.mktemp("replica"), "--server-id=2", "--read-only")
    master.start()
    replica.start()
    on_master, on_replica = master.server.connect(), replica.server.connect()
    query(
        on_replica,
        "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER='root', MASTER_PASSWORD='', "
        "MASTER_USE_GTID=slave_pos",
        (master.port,),
    )
    query(on_replica, "START SLAVE")
    query(on_master, f"CREATE DATABASE `{HERALD}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    for ddl in seeding.herald_ddl():
        query(on_master, f"USE `{HERALD}`")
        query(on_master, ddl)
    # The web's replica user exists on the replica only (its binlog-free local change).
    query(on_replica, f"CREATE USER '{READER[0]}'@'127.0.0.1' IDENTIFIED BY '{READER[1]}'")
    query(on_replica, f"GRANT SELECT ON `{HERALD}`.* TO '{READER[0]}'@'127.0.0.1'")
    query(on_replica, f"GRANT SLAVE MONITOR ON *.* TO '{READER[0]}'@'127.0.0.1'")
    pair = Pair(master, replica, on_master, on_replica)
    wait_for(pair.caught_up, 30, "the replica to catch up")
    yield pair
    on_master.close()
    on_replica.close()
    replica.remove()
    master.remove()


def add_hook(connection: Any, name: str, *, row_id: int | None = None) -> str:
    """A hook and one queued request; `row_id` for both when written on the replica alone (ids far from the
    master's, or replication would stop at the duplicate key)."""
    now = int(time.time())
    fixed = {} if row_id is None else {"id": row_id}
    row = fixed | seeding.hook_row("http://127.0.0.1:9/replica", now=now, name=name)
    with connection.cursor() as cursor:
        seeding.insert(cursor, f"`{HERALD}`.`herald_webhook`", [row])
        request = fixed | seeding.request_row(str(row["phid"]), seeding.properties(), now=now)
        seeding.insert(cursor, f"`{HERALD}`.`herald_webhookrequest`", [request])
    return str(row["phid"])


def service_env(pair: Pair, tmp: Path, **more: str) -> dict[str, str]:
    from tests.support.helpers import worker_env

    return worker_env(
        GORGE_WEBHOOK_DATABASE_URL=pair.url(pair.master),
        GORGE_WEBHOOK_REPLICA_DATABASE_URL=pair.url(pair.replica, *READER),
        GORGE_WEBHOOK_REPLICA_MAX_LAG_SEC="2",
        GORGE_WEBHOOK_SILENT="false",
        GORGE_SERVICE_TOKEN=TOKEN,
        DATABASE_URL=f"sqlite:///{tmp / 'django.sqlite3'}",
        DJANGO_SUPERUSER_PASSWORD="a-long-staff-password",
        **more,
    )


@pytest.fixture(scope="module")
def web(pair: Pair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, requests.Session]]:
    tmp = tmp_path_factory.mktemp("web")
    # The production settings with the static files collected here (the image collects them at build).
    (tmp / "web_settings.py").write_text(
        f"from gorge_site.settings import *  # noqa: F403\nSTATIC_ROOT = {str(tmp / 'static')!r}\n"
    )
    env = service_env(pair, tmp, DJANGO_SETTINGS_MODULE="web_settings", PYTHONPATH=str(tmp))
    manage("collectstatic", "--noinput", "--verbosity", "0", env=env)
    manage("migrate", "--verbosity", "0", env=env)
    manage("createsuperuser", "--noinput", "--username", "staff", "--email", "staff@example.org", env=env)
    port = _free_port()
    log = (tmp / "web.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "gorge_site.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base), 30, "the web process")
        yield base, logged_in(base, "staff", "a-long-staff-password")
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def _answers(base: str) -> bool:
    try:
        return requests.get(f"{base}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def health(base: str) -> dict[str, Any]:
    answer = requests.get(f"{base}/api/webhook/health", headers={"X-Service-Token": TOKEN}, timeout=10)
    assert answer.status_code == 200, answer.text[:500]
    return dict(answer.json()["data"])


def test_pages_read_the_replica_show_its_lag_and_fall_back_beyond_the_bound(
    pair: Pair, web: tuple[str, requests.Session]
) -> None:
    base, staff = web
    both = add_hook(pair.on_master, "on-both")
    wait_for(pair.caught_up, 30, "the replica to catch up")
    # A row only the replica has (written past replication): seen only while the pages read the replica.
    query(pair.on_replica, "SET SESSION sql_log_bin = 0")
    only = add_hook(pair.on_replica, "only-on-replica", row_id=1_000_000)
    seen = wait_for(lambda: (h := health(base)).get("replica", {}).get("in_use") and h, 30, "the replica in use")
    assert seen["replica"]["lag_sec"] == 0 and seen["replica"]["max_lag_sec"] == 2
    assert {both, only} <= {hook["phid"] for hook in seen["hooks"]}
    dashboard = html.unescape(staff.get(f"{base}/", timeout=10).text)
    assert "only-on-replica" in dashboard and "Read from a replica of herald's master, 0 s behind" in dashboard
    admin = staff.get(f"{base}/admin/webhook_delivery/heraldwebhook/", timeout=10).text
    assert "only-on-replica" in admin  # the admin's ORM reads go there too

    # A replica 1 hour behind (MariaDB's delayed replication): beyond the bound, the master is read.
    query(pair.on_replica, "STOP SLAVE")
    query(pair.on_replica, "CHANGE MASTER TO MASTER_DELAY = 3600")
    query(pair.on_replica, "START SLAVE")
    add_hook(pair.on_master, "after-the-delay")
    wait_for(lambda: (replica_status(pair.on_replica).get("Seconds_Behind_Master") or 0) > 2, 30, "the replica to lag")
    behind = wait_for(
        lambda: (h := health(base))["replica"]["in_use"] is False and h, 30, "the fall-back to the master"
    )
    assert "behind, more than 2 s" in behind["replica"]["reason"] and behind["replica"]["lag_sec"] > 2
    assert only not in {hook["phid"] for hook in behind["hooks"]}
    assert "after-the-delay" in {hook.get("name") for hook in behind["hooks"]}
    dashboard = html.unescape(staff.get(f"{base}/", timeout=10).text)
    assert "only-on-replica" not in dashboard and "Read from herald's master, not the replica" in dashboard

    query(pair.on_replica, "STOP SLAVE")
    query(pair.on_replica, "CHANGE MASTER TO MASTER_DELAY = 0")
    query(pair.on_replica, "START SLAVE")
    wait_for(pair.caught_up, 30, "the replica to catch up again")


def test_nothing_but_reads_reaches_the_replica(pair: Pair, web: tuple[str, requests.Session], tmp_path: Path) -> None:
    base, staff = web
    query(pair.on_replica, "SET GLOBAL log_output = 'TABLE'")
    query(pair.on_replica, "TRUNCATE mysql.general_log")
    query(pair.on_replica, "SET GLOBAL general_log = 1")
    try:
        hook = add_hook(pair.on_master, "delivered-on-the-master")
        wait_for(pair.caught_up, 30, "the replica to catch up")
        env = service_env(pair, tmp_path, GORGE_WEBHOOK_DELIVERY_TIMEOUT="1", GORGE_WEBHOOK_OUTBOUND_BLACKLIST="")
        manage("migrate", "--verbosity", "0", env=env)
        manage("deliver_webhooks", "--once", env=env)
        assert on_master(pair, hook) == ("fail", "failed")  # attempted (connection refused), written there
        manage("watch_webhooks", "--once", env=env)
        manage("requeue_webhooks", "--hook", hook, "--yes", env=env)
        assert on_master(pair, hook)[1] == "queued"
        wait_for(lambda: health(base)["replica"]["in_use"], 30, "the pages to read the replica")
        staff.get(f"{base}/", timeout=10)
        staff.get(f"{base}/admin/webhook_delivery/heraldwebhookrequest/", timeout=10)
        requests.get(f"{base}/metrics", timeout=10)
    finally:
        query(pair.on_replica, "SET GLOBAL general_log = 0")
    statements = query(
        pair.on_replica,
        "SELECT user_host, CONVERT(argument USING utf8mb4) FROM mysql.general_log WHERE command_type = 'Query'",
    )
    # The services hold no other login for the replica than READER's: whatever they sent is under it.
    ours = [str(text) for user, text in statements if str(user).startswith(f"{READER[0]}[")]
    assert any(text.upper().startswith("SELECT") for text in ours), "the pages read nothing from the replica"
    verbs = {text.split(None, 1)[0].upper() for text in ours}
    # SET: the connection's session options; COMMIT ends the pages' READ UNCOMMITTED read transaction.
    assert verbs <= {"SELECT", "SHOW", "SET", "COMMIT", "ROLLBACK"}, verbs
    assert not [text for text in ours if re.match(r"(?i)set\s+(global|password|role)", text)]


def on_master(pair: Pair, hook: str) -> tuple[str, str]:
    ((result, status),) = query(
        pair.on_master,
        f"SELECT lastRequestResult, status FROM `{HERALD}`.herald_webhookrequest WHERE webhookPHID = %s",
        (hook,),
    )
    return str(result), str(status)


CRAWL = """
import json, time
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
user = get_user_model().objects.create_superuser("crawler", password="x")
client = Client()
client.force_login(user)
plain = {**settings.STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
times = []
with override_settings(STORAGES=plain):
    for _ in range(40):
        started = time.monotonic()
        status = client.get("/", HTTP_HOST="localhost").status_code
        times.append((status, time.monotonic() - started))
print(json.dumps(times))
"""


def accept_and_hang(sock: Any) -> None:
    time.sleep(60)  # a replica that takes the connection and never says a word


def phorge_database() -> str:
    from django.conf import settings

    return str(settings.DATABASES["phorge"]["NAME"])


@pytest.mark.slow
@PHORGE_DB
def test_a_replica_that_accepts_and_never_answers_costs_the_pages_little(phorge: Phorge, site: SiteDatabase) -> None:
    """Item 12 of the second security review: a hung replica made one page in every 5 s wait 5 s."""
    from tests.support.rawserver import RawServer

    phorge.request(phorge.hook("http://127.0.0.1:9/x"))
    with RawServer(accept_and_hang) as replica:
        env = worker_env(
            GORGE_WEBHOOK_REPLICA_DATABASE_URL=f"mysql://root@127.0.0.1:{replica.port}/{phorge_database()}",
            DATABASE_URL=site.url,
            ALLOWED_HOSTS="localhost",
        )
        started = time.monotonic()
        times = json.loads(manage("shell", "-c", CRAWL, env=env).stdout.strip().splitlines()[-1])
    assert all(status == 200 for status, _took in times), "every page read the master instead"
    slow = [took for _status, took in times if took > 1]
    assert len(slow) <= 1, f"only the first page waits for the replica: {slow}"
    assert max(took for _status, took in times) < 4
    assert time.monotonic() - started < 60
