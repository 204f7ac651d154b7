"""Bad rows, bad hosts, careless runs: nothing lost, nothing sent twice, nothing leaked, no traceback.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/db/test_bad_input.py."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.conf import settings

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin, worker_env
from tests.support.processes import manage
from tests.support.receiver import Receiver

pytestmark = PHORGE_DB


@pytest.mark.slow
def test_a_production_database_url_in_the_environment_is_never_touched(tmp_path: Path) -> None:
    sentinel = f"gwsentinel{os.getpid()}_herald"
    admin = mysql_admin()
    cursor = admin.cursor()
    cursor.execute(f"CREATE DATABASE `{sentinel}`")
    cursor.execute(f"CREATE TABLE `{sentinel}`.`herald_webhook` (id INT PRIMARY KEY)")
    cursor.execute(f"INSERT INTO `{sentinel}`.`herald_webhook` VALUES (7)")
    db = settings.DATABASES["phorge"]
    server = f"mysql://{db['USER']}@{db['HOST']}:{db['PORT']}"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        GORGE_TEST_DATABASE_URL=server,
        GORGE_WEBHOOK_DATABASE_URL=f"{server}/{sentinel}",  # as exported in a production shell or container
        GORGE_WEBHOOK_NAMESPACE=sentinel.removesuffix("_herald"),
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/db/test_admin.py", "-x"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        cursor.execute(f"SELECT id FROM `{sentinel}`.`herald_webhook`")
        assert cursor.fetchall() == ((7,),)
    finally:
        cursor.execute(f"DROP DATABASE IF EXISTS `{sentinel}`")
        admin.close()


class SilentNameServer:
    """A UDP name server on 127.0.0.1:53 that reads every query and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 53))
        self.sock.settimeout(0.2)
        self.queries = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._swallow, daemon=True)

    def _swallow(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recv(4096)
            except TimeoutError:
                continue
            self.queries += 1

    def __enter__(self) -> SilentNameServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)  # the port is free again only once no thread is inside recv()
        self.sock.close()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a mount namespace")
def test_a_name_server_that_never_answers_starves_no_other_hook(phorge: Phorge, tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:4 attempts:1\n")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost healthy.test\n")
    with Receiver() as receiver, SilentNameServer() as dns:
        hung = [phorge.request(phorge.hook(f"http://hang{i}.example.test:{receiver.port}/dns/ok")) for i in range(12)]
        healthy = phorge.request(phorge.hook(f"http://healthy.test:{receiver.port}/healthy/ok"))
        env = worker_env(GORGE_WEBHOOK_DELIVERY_TIMEOUT="1.5", GORGE_WEBHOOK_CLAIM_LEASE_SEC="10")
        script = (
            f"mount --bind {resolv} /etc/resolv.conf && mount --bind {hosts} /etc/hosts && "
            f"exec {sys.executable} manage.py deliver_webhooks --once"
        )
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert dns.queries > 0  # the hung names really went to the silent server
    assert phorge.row(healthy)["status"] == "sent"
    assert [r.path for r in receiver.requests] == ["/healthy/ok"]
    for phid in hung:
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"]) == ("failed", "fail")
        assert row["properties"].endswith(',"errorType":"timeout","errorCode":28}')


def test_an_ipv4_only_blacklist_is_warned_about_at_start_up() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DJANGO_SETTINGS_MODULE="gorge_site.settings", GORGE_WEBHOOK_OUTBOUND_BLACKLIST="10.0.0.0/8,127.0.0.0/8")
    done = manage("check", env=env, ok=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "gorge.W002" in output and "fc00::/7" in output and "fe80::/10" in output and "::1/128" in output
    assert "this host 0.0.0.0/8" in output and "unspecified ::/128" in output
