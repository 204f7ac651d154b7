"""The container image, checked without a Docker engine: the Dockerfile parsed and linted, and its web
command and HEALTHCHECK run for real against the production settings.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_dockerfile.py."""

from __future__ import annotations

import secrets
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support import ROOT
from tests.support.dockerfile import FINAL, exec_form, healthcheck_command
from tests.support.helpers import PHORGE_DB, Phorge, production_env, worker_env
from tests.support.waiting import wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_http(url: str, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    def answers() -> bool:
        assert process.poll() is None, f"the process exited with {process.returncode}"
        try:
            urllib.request.urlopen(url, timeout=2).close()  # noqa: S310 - http on loopback
        except urllib.error.HTTPError:
            return True  # it answers; the status is the test's business
        except OSError:
            return False
        return True

    wait_for(answers, timeout, f"an answer at {url}", every=0.2)


def test_image_web_command_and_healthcheck_work_with_production_settings(tmp_path: Path) -> None:
    port = free_port()
    command = [arg.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for arg in exec_form(FINAL.all("CMD")[0])]
    command[0] = str(Path(sys.executable).parent / command[0])
    env = production_env(tmp_path, WEB_CONCURRENCY="1")
    web = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", web)
        probe = healthcheck_command()
        probe[0] = sys.executable
        healthy = subprocess.run(probe, env={**env, "GORGE_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"})
        assert healthy.returncode == 0
        wrong_host = subprocess.run(
            probe,
            env={**env, "ALLOWED_HOSTS": "", "GORGE_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"},
            capture_output=True,
        )
        assert wrong_host.returncode != 0, "a rejected Host header must make the check fail"
    finally:
        web.send_signal(signal.SIGTERM)
        web.communicate(timeout=30)
    down = subprocess.run(
        probe, env={**env, "GORGE_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"}, capture_output=True
    )
    assert down.returncode != 0, "the check must fail when nothing answers"


def test_access_log_leaves_out_query_strings(tmp_path: Path) -> None:
    port = free_port()
    command = [arg.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for arg in exec_form(FINAL.all("CMD")[0])]
    command[0] = str(Path(sys.executable).parent / command[0])
    env = production_env(tmp_path, WEB_CONCURRENCY="1", GORGE_SERVICE_TOKEN="t0ken-" + secrets.token_hex(8))
    web = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", web)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/healthz?token={env['GORGE_SERVICE_TOKEN']}",
            headers={"Host": "webhooks.example.org"},
        )
        urllib.request.urlopen(request, timeout=5).close()  # noqa: S310 - http on loopback
    finally:
        web.send_signal(signal.SIGTERM)
        out, _err = web.communicate(timeout=30)
    log = out.decode()
    assert '"GET /healthz" 200' in log
    assert env["GORGE_SERVICE_TOKEN"] not in log and "token=" not in log


@PHORGE_DB
def test_worker_command_and_its_healthcheck(phorge: Phorge, tmp_path: Path) -> None:
    port = free_port()
    env = worker_env(
        DJANGO_SETTINGS_MODULE="gorge_site.settings",
        GORGE_ENV_FILE="/dev/null",
        SECRET_KEY=secrets.token_urlsafe(50),
        DATABASE_URL=f"sqlite:///{tmp_path / 'site.sqlite3'}",
        GORGE_HEALTHCHECK_URL=f"http://127.0.0.1:{port}/metrics",
    )
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "deliver_webhooks", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/metrics", worker)
        probe = healthcheck_command()
        probe[0] = sys.executable
        assert subprocess.run(probe, env=env).returncode == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err.decode()[-2000:]
