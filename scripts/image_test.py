"""make image-test: build the image with the project's Dockerfile, unchanged, and run it for real.

With podman (no Docker engine here). When the official base image is not available (no registry), a
stand-in is made with debootstrap from Debian's packages and tagged with the exact name the FROM lines
use. Then, against the tests' MariaDB (tests/support/testdb.py) with Phorge's DDL and a receiver on the host:

* the image builds, runs as 10001:10001, holds no compiler and no tests, and tells this tree's version
  (`deliver_webhooks --version`, read from the pyproject.toml it copies);
* the web process (the default command, read-only root, a tmpfs on /tmp) answers /healthz and /readyz,
  and the image's HEALTHCHECK passes;
* `migrate`, then `deliver_webhooks` delivers every queued request, signed with the hook's key, and
  stops with exit 0 on SIGTERM;
* `manage.py demo --no-serve` runs from the image's files;
* no container logs an ERROR or a Traceback.

Everything it creates (containers, images, volume, database, stand-in base) is removed, pass or fail.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import testdb
from webhook_delivery.demo.receiver import DemoReceiver
from webhook_delivery.phorge import seeding
from webhook_delivery.version import VERSION

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

HOOK_PATH = "/hook"
SERVER = testdb.server()  # the tests' MariaDB (GORGE_TEST_DATABASE_URL); the containers share the host's network


def create_queue(receiver: DemoReceiver, count: int) -> None:
    """A throwaway herald database from Phorge's DDL, one hook on the receiver (which learns its key),
    `count` queued requests."""
    admin = SERVER.connect()
    cursor = admin.cursor()
    cursor.execute(f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    cursor.execute(f"USE `{DATABASE}`")
    seeding.create_herald_tables(cursor)
    cursor.execute("SELECT UNIX_TIMESTAMP()")
    now = int(cursor.fetchone()[0])
    hook = seeding.hook_row(receiver.url(HOOK_PATH), now=now, name="image test")
    receiver.expect(HOOK_PATH, hook["hmacKey"])
    seeding.insert(cursor, seeding.HOOK_TABLE, [hook])
    properties = seeding.properties(retry="forever", triggers=[hook["phid"]], flags=False)
    seeding.insert(
        cursor, seeding.REQUEST_TABLE, [seeding.request_row(hook["phid"], properties, now=now) for _ in range(count)]
    )
    admin.close()


def sent_count() -> int:
    connection = SERVER.connect(DATABASE)
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'sent'")
        return int(cursor.fetchone()[0])
    finally:
        connection.close()


def drop_queue() -> None:
    admin = SERVER.connect()
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


def check(podman: Podman, receiver: DemoReceiver) -> None:
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
    told = podman.run("run", "--rm", IMAGE, "python", "manage.py", "deliver_webhooks", "--version")
    if told.stdout.strip() != VERSION:
        raise Failed(f"deliver_webhooks --version in the image says {told.stdout.strip()!r}, not {VERSION!r}")

    create_queue(receiver, 5)
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
        f"GORGE_WEBHOOK_DATABASE_URL={SERVER.url(DATABASE)}",
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
    if len(receiver.calls) != 5:
        raise Failed(f"the receiver got {len(receiver.calls)} requests, expected 5")
    if not all(call.signature_valid for call in receiver.calls):
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


def main() -> int:
    if shutil.which("podman") is None or shutil.which("runc") is None:
        say("podman and runc are needed (as root: apt-get install podman runc debootstrap)")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="gwimage-"))
    podman = Podman(workdir)
    started = time.monotonic()
    with DemoReceiver() as receiver:
        try:
            stand_in_base(podman, workdir)
            check(podman, receiver)
        except (Failed, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            say(f"FAILED: {exc}")
            return 1
        finally:
            podman.cleanup()
            drop_queue()
            shutil.rmtree(workdir, ignore_errors=True)
    say(f"passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
