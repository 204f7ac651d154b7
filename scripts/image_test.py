"""make image-test: build the image with the project's Dockerfile, unchanged, and run it for real.

With podman (no Docker engine here). When the official base image is not available (no registry), a
stand-in is made with debootstrap from Debian's packages and tagged with the exact name the FROM lines
use. Then, against the local MariaDB with Phorge's DDL and a receiver on the host:

* the image builds, runs as 10001:10001, holds no compiler and no tests;
* the web process (the default command, read-only root, a tmpfs on /tmp) answers /healthz and /readyz,
  and the image's HEALTHCHECK passes;
* `migrate`, then `deliver_webhooks` delivers every queued request, signed with the hook's key, and
  stops with exit 0 on SIGTERM;
* `manage.py demo --no-serve` runs from the image's files;
* no container logs an ERROR or a Traceback.

Everything it creates (containers, images, volume, database, stand-in base) is removed, pass or fail.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import MySQLdb

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
RUN_ID = f"{os.getpid()}"
IMAGE = f"localhost/gorge-webhook-django:imagetest-{RUN_ID}"
DATABASE = f"gwimage{RUN_ID}_herald"
VOLUME = f"gwimage{RUN_ID}-var"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


class Failed(Exception):
    pass


def say(message: str) -> None:
    print(f"==> image-test: {message}", file=sys.stderr, flush=True)


class Podman:
    def __init__(self, workdir: Path) -> None:
        import resource

        conf = workdir / "containers.conf"
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        conf.write_text(CONTAINERS_CONF.format(nofile=min(hard, 65536)))
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.created: list[list[str]] = []  # cleanup commands, newest last

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise Failed(f"podman {' '.join(args[:3])} ... exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done

    def remember(self, *cleanup: str) -> None:
        self.created.append(list(cleanup))

    def cleanup(self) -> None:
        for args in reversed(self.created):
            self.run(*args, check=False, timeout=120)


def stand_in_base(podman: Podman, workdir: Path) -> None:
    """Debian 12's python3 in the shape of the official image: python and pip on /usr/local/bin, pip free to
    install, and this machine's certificate authorities (its pip may reach PyPI through a proxy)."""
    if podman.run("image", "exists", BASE_IMAGE, check=False).returncode == 0:
        say(f"using the base image {BASE_IMAGE} already here")
        return
    if shutil.which("debootstrap") is None:
        raise Failed("no base image and no debootstrap to make a stand-in (apt-get install debootstrap)")
    say(f"no {BASE_IMAGE} here: making a stand-in with debootstrap (about a minute)")
    rootfs = workdir / "rootfs"
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,python3-pip,python3-dev,ca-certificates",
            "bookworm",
            str(rootfs),
            "http://deb.debian.org/debian",
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    for name, target in (("python", "/usr/bin/python3"), ("pip", "/usr/bin/pip3")):
        (rootfs / "usr/local/bin" / name).symlink_to(target)
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    shutil.copyfile("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc/ssl/certs/ca-certificates.crt")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(
        ["podman", "import", "-", BASE_IMAGE], stdin=tar.stdout, env=podman.env, capture_output=True, timeout=600
    )
    tar.wait()
    if imported.returncode != 0:
        raise Failed(f"podman import failed: {imported.stderr.decode()[-2000:]}")
    podman.remember("rmi", "-f", BASE_IMAGE)
    shutil.rmtree(rootfs, ignore_errors=True)


# -- the receiver and the queue ------------------------------------------------------------------------------


class Receiver:
    def __init__(self) -> None:
        received: list[tuple[str, bytes, str]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.path, body, self.headers.get("X-Phabricator-Webhook-Signature", "")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


def phid(kind: str) -> str:
    return f"PHID-{kind}-" + "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(20))


def create_queue(port: int, count: int) -> tuple[str, str]:
    """A throwaway herald database from Phorge's DDL, one hook on the receiver, `count` queued requests."""
    from webhook_delivery.sql import PHORGE_SCHEMA

    admin = MySQLdb.connect(host="127.0.0.1", user="root", charset="utf8mb4", autocommit=True)
    cursor = admin.cursor()
    cursor.execute(f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    cursor.execute(f"USE `{DATABASE}`")
    text = PHORGE_SCHEMA.read_text().split("-- Dump completed", 1)[0]
    for chunk in text.split(";\n"):
        statement = "\n".join(line for line in chunk.splitlines() if line.strip() and not line.startswith("--"))
        if statement.upper().startswith("CREATE TABLE"):
            cursor.execute(statement)
    hook, key = phid("HWBH"), "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(32))
    cursor.execute(
        "INSERT INTO herald_webhook (phid, name, webhookURI, viewPolicy, editPolicy, status, hmacKey, dateCreated, "
        "dateModified) VALUES (%s, 'image test', %s, 'users', 'users', 'enabled', %s, UNIX_TIMESTAMP(), "
        "UNIX_TIMESTAMP())",
        (hook, f"http://127.0.0.1:{port}/hook", key),
    )
    for _ in range(count):
        properties = json.dumps({"retry": "forever", "transactionPHIDs": [], "triggerPHIDs": [hook]})
        cursor.execute(
            "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, lastRequestResult, "
            "lastRequestEpoch, dateCreated, dateModified) VALUES (%s, %s, %s, 'queued', %s, 'none', 0, "
            "UNIX_TIMESTAMP(), UNIX_TIMESTAMP())",
            (phid("HWBR"), hook, phid("TASK"), properties),
        )
    admin.close()
    return hook, key


def sent_count() -> int:
    connection = MySQLdb.connect(host="127.0.0.1", user="root", database=DATABASE)
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'sent'")
        return int(cursor.fetchone()[0])
    finally:
        connection.close()


def drop_queue() -> None:
    admin = MySQLdb.connect(host="127.0.0.1", user="root", autocommit=True)
    admin.cursor().execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")
    admin.close()


# -- the checks ------------------------------------------------------------------------------------------------


def wait_until(what: str, condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise Failed(f"timed out waiting for {what}")
        time.sleep(0.5)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def bad_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ERROR" in line or "Traceback" in line]


def check(podman: Podman, receiver: Receiver) -> None:
    say("building the image with the project's Dockerfile")
    before = set(podman.run("images", "-q", "--all", "--no-trunc").stdout.split())
    # From scratch: a real test of the Dockerfile (and buildah 1.28 mounts a cached stage empty).
    build = podman.run(
        "build",
        "--no-cache",
        "--format",
        "docker",
        "--pull=never",
        "--network=host",
        "-t",
        IMAGE,
        str(ROOT),
        check=False,
    )
    for stage in set(podman.run("images", "-q", "--all", "--no-trunc").stdout.split()) - before:
        podman.remember("rmi", "-f", stage)  # the builder stage's image and the final one
    if build.returncode != 0:
        raise Failed(f"the image does not build:\n{(build.stdout + build.stderr)[-4000:]}")
    user = podman.run("image", "inspect", "--format", "{{.Config.User}}", IMAGE).stdout.strip()
    if user != "10001:10001":
        raise Failed(f"the image runs as {user!r}, not 10001:10001")
    inside = podman.run(
        "run",
        "--rm",
        IMAGE,
        "sh",
        "-c",
        "for c in gcc cc make; do command -v $c; done; test -e /app/tests && echo /app/tests; true",
    )
    if inside.stdout.strip():
        raise Failed(f"the image holds what it should not: {inside.stdout.strip()}")

    hook, key = create_queue(receiver.port, 5)
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            raise Failed("port 8000 is in use on this machine: the web container (host network) needs it")
    common = [
        "--network=host",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "-v",
        f"{VOLUME}:/app/var",
        "-e",
        f"SECRET_KEY=image-test-{secrets.token_hex(24)}",
        "-e",
        "ALLOWED_HOSTS=127.0.0.1,localhost",
        "-e",
        "GORGE_BEHIND_TLS_PROXY=false",
        "-e",
        f"GORGE_WEBHOOK_DATABASE_URL=mysql://root@127.0.0.1:3306/{DATABASE}",
        "-e",
        "GORGE_WEBHOOK_OUTBOUND_BLACKLIST=",
        "-e",
        "GORGE_WEBHOOK_SILENT=false",  # declared: with no Phorge local.json to read, silent mode is unknown
    ]
    podman.run("volume", "create", VOLUME)
    podman.remember("volume", "rm", "-f", VOLUME)
    say("migrate, then the web process (the image's default command)")
    migrate = podman.run(
        "run", "--rm", "--no-healthcheck", *common, IMAGE, "python", "manage.py", "migrate", "--noinput"
    )
    web = f"gwimage{RUN_ID}-web"
    podman.run("run", "-d", "--name", web, *common, IMAGE)
    podman.remember("rm", "-f", web)
    wait_until("/healthz", lambda: http_status("http://127.0.0.1:8000/healthz") == 200, 60)
    if http_status("http://127.0.0.1:8000/readyz") != 200:
        raise Failed("/readyz does not answer 200")
    wait_until("the HEALTHCHECK", lambda: podman.run("healthcheck", "run", web, check=False).returncode == 0, 60)

    say("deliver_webhooks until every request is sent, then SIGTERM")
    worker = f"gwimage{RUN_ID}-worker"
    podman.run("run", "-d", "--name", worker, *common, IMAGE, "python", "manage.py", "deliver_webhooks")
    podman.remember("rm", "-f", worker)
    wait_until("5 deliveries", lambda: sent_count() == 5, 60)
    podman.run("stop", "-t", "30", worker)
    code = podman.run("inspect", "--format", "{{.State.ExitCode}}", worker).stdout.strip()
    if code != "0":
        raise Failed(f"deliver_webhooks exited {code} on SIGTERM")
    if len(receiver.received) != 5:
        raise Failed(f"the receiver got {len(receiver.received)} requests, expected 5")
    for _path, body, signature in receiver.received:
        if signature != hmac.new(key.encode(), body, hashlib.sha256).hexdigest():
            raise Failed("a request arrived with a wrong signature")

    say("manage.py demo --no-serve from the image's files")
    demo = podman.run(
        "run",
        "--rm",
        "--no-healthcheck",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "-v",
        f"{VOLUME}:/app/var",
        "-e",
        "DEBUG=true",
        "-e",
        f"SECRET_KEY=demo-{secrets.token_hex(16)}",
        "-e",
        "DATABASE_URL=sqlite:////app/var/demo/site.sqlite3",
        "-e",
        "GORGE_WEBHOOK_DATABASE_URL=sqlite:////app/var/demo/phabricator_herald.sqlite3",
        IMAGE,
        "python",
        "manage.py",
        "demo",
        "--no-serve",
        check=False,
        timeout=300,
    )
    if demo.returncode != 0:
        raise Failed(f"the demo fails in the image:\n{(demo.stdout + demo.stderr)[-3000:]}")

    podman.run("stop", "-t", "20", web)
    logs = {
        "web": podman.run("logs", web).stdout + podman.run("logs", web).stderr,
        "worker": podman.run("logs", worker).stdout + podman.run("logs", worker).stderr,
        "migrate": migrate.stdout + migrate.stderr,
    }
    for name, text in logs.items():
        if bad_lines(text):
            raise Failed(f"the {name} container logged:\n" + "\n".join(bad_lines(text)[:10]))
    del hook


def main() -> int:
    if shutil.which("podman") is None or shutil.which("runc") is None:
        say("podman and runc are needed (as root: apt-get install podman runc debootstrap)")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="gwimage-"))
    podman = Podman(workdir)
    receiver = Receiver()
    started = time.monotonic()
    try:
        stand_in_base(podman, workdir)
        check(podman, receiver)
    except (Failed, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        say(f"FAILED: {exc}")
        return 1
    finally:
        receiver.stop()
        podman.cleanup()
        drop_queue()
        shutil.rmtree(workdir, ignore_errors=True)
    say(f"passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
