"""The demo, step by step: fresh SQLite files, Phorge's tables, two real `deliver_webhooks --once` runs
around a retry backoff, a summary read back from the database and the receiver, then the dashboard.
"""

from __future__ import annotations

import http.cookiejar
import ipaddress
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connections

from webhook_delivery.config import PHORGE_ALIAS, default_blacklist
from webhook_delivery.sql import PHORGE_SCHEMA
from webhook_delivery.worker.store import Store

from .receiver import DemoReceiver
from .scenario import RequestState, Summary, read_requests, seed, summarize
from .sqlite_schema import translate

RETRY_BACKOFF_SEC = 2
DELIVER_TIMEOUT_SEC = 120
SERVER_START_SEC = 30
STAFF_USERNAME = "demo"


class Output(Protocol):
    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...


class DemoError(Exception):
    """The demo cannot run or a step failed; the message says what to do."""


@dataclass(frozen=True)
class PageCheck:
    url: str
    status: int
    title: str


@dataclass(frozen=True)
class DemoResult:
    summary: Summary
    page: PageCheck
    username: str
    password: str


def demo_blacklist() -> list[str]:
    """Phorge's default outbound blacklist without loopback, so the local receiver can be called."""
    loopback = ipaddress.ip_network("127.0.0.0/8")
    return [str(network) for network in default_blacklist() if network != loopback]


def _sqlite_file(alias: str, demo_dir: Path) -> Path:
    database = settings.DATABASES[alias]
    name = str(database.get("NAME") or "")
    if not str(database.get("ENGINE", "")).endswith("sqlite3") or name in {"", ":memory:"}:
        raise DemoError(
            f"the demo creates Phorge's tables in its own SQLite files, but the {alias!r} database is not a "
            "SQLite file: start it with `make demo`"
        )
    path = Path(name).resolve()
    if path.parent != demo_dir.resolve():
        raise DemoError(f"the {alias!r} SQLite file must be in {demo_dir} (it is recreated): start it with `make demo`")
    return path


def _recreate_databases(demo_dir: Path) -> None:
    files = [_sqlite_file(alias, demo_dir) for alias in ("default", PHORGE_ALIAS)]
    for alias in ("default", PHORGE_ALIAS):
        connections[alias].close()
    for path in files:
        for leftover in (path, Path(f"{path}-journal"), Path(f"{path}-wal"), Path(f"{path}-shm")):
            leftover.unlink(missing_ok=True)


def create_herald_tables(schema_file: Path) -> None:
    if not schema_file.is_file():
        raise DemoError(f"Phorge's DDL {schema_file} is missing: run the demo from a checkout of the project")
    with connections[PHORGE_ALIAS].cursor() as cursor:
        for statement in translate(schema_file.read_text()):
            cursor.execute(statement)


def create_staff_user() -> tuple[str, str]:
    password = secrets.token_urlsafe(12)
    get_user_model().objects.create_superuser(STAFF_USERNAME, "demo@example.invalid", password)
    return STAFF_USERNAME, password


def child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DEBUG": "true",
            "GORGE_WEBHOOK_RETRY_BACKOFF_SEC": str(RETRY_BACKOFF_SEC),
            "GORGE_WEBHOOK_OUTBOUND_BLACKLIST": json.dumps(demo_blacklist()),
            "GORGE_WEBHOOK_SILENT": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def deliver_once(base_dir: Path, out: Output, label: str) -> None:
    out.write(f"\n--- {label}: python manage.py deliver_webhooks --once\n")
    out.flush()
    completed = subprocess.run(
        [sys.executable, "manage.py", "deliver_webhooks", "--once"],
        cwd=base_dir,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=DELIVER_TIMEOUT_SEC,
        check=False,
    )
    for line in (completed.stdout + completed.stderr).splitlines():
        out.write(f"    | {line}\n")
    if completed.returncode != 0:
        raise DemoError(f"deliver_webhooks --once exited with {completed.returncode}")


def wait_for_retry(store: Store, out: Output) -> None:
    """Sleep on the database clock until every failed retry=forever request is due again."""
    with store.connection.cursor() as cursor:
        cursor.execute(
            "SELECT MAX(lastRequestEpoch) FROM herald_webhookrequest "
            "WHERE status = 'queued' AND lastRequestResult = 'fail'"
        )
        last = cursor.fetchone()[0]
    if last is None:
        return
    due = int(last) + RETRY_BACKOFF_SEC
    out.write(f"\nwaiting for the retry backoff (GORGE_WEBHOOK_RETRY_BACKOFF_SEC={RETRY_BACKOFF_SEC}) ...\n")
    out.flush()
    give_up = time.monotonic() + RETRY_BACKOFF_SEC + 10
    while store.db_now() < due:
        if time.monotonic() > give_up:
            raise DemoError("the database clock did not reach the retry time")
        time.sleep(0.2)


def print_requests(out: Output, states: list[RequestState]) -> None:
    out.write(f"\n    {'request':<30} {'hook':<32} {'status':<7} {'result':<6} {'error':<13} attempts\n")
    for s in states:
        out.write(f"    {s.phid:<30} {s.hook_name:<32} {s.status:<7} {s.result:<6} {s.error:<13} {s.attempts}\n")


def print_summary(out: Output, summary: Summary) -> None:
    failures = ", ".join(f"{error}: {count}" for error, count in summary.failures.items()) or "none"
    out.write(
        "\nSummary (read back from the demo database and the receiver)\n"
        f"  requests            {summary.requests}\n"
        f"  delivered           {summary.delivered}\n"
        f"  failed              {summary.failed}  ({failures})\n"
        f"  still queued        {summary.queued}\n"
        f"  retried             {summary.retried}  (attempted again after a failed attempt)\n"
        f"  receiver calls      {summary.receiver_calls}\n"
        f"  signatures valid    {summary.signatures_valid}\n"
        f"  signatures invalid  {summary.signatures_invalid}\n"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(base_dir: Path, port: int, log: Path | None) -> subprocess.Popen[bytes]:
    """runserver on loopback; its output goes to `log`, or to this terminal when log is None."""
    output = log.open("wb") if log is not None else None
    server = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py, fixed arguments
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=base_dir,
        env=child_environment(),
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
    )
    if output is not None:
        output.close()
    login = f"http://127.0.0.1:{port}/admin/login/"
    deadline = time.monotonic() + SERVER_START_SEC
    while time.monotonic() < deadline:
        if server.poll() is not None:
            said = log.read_text(errors="replace") if log is not None else ""
            raise DemoError(f"the web server did not start (is port {port} in use? set DEMO_PORT)\n{said}")
        try:
            with urllib.request.urlopen(login, timeout=2):
                return server
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    stop_server(server)
    raise DemoError(f"the web server did not answer on port {port} within {SERVER_START_SEC} s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def check_pages(port: int, username: str, password: str) -> PageCheck:
    """Log in through the admin login form as a person would, then open the dashboard (or the admin)."""
    base = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with opener.open(f"{base}/admin/login/", timeout=10) as response:
        form = response.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    if token is None:
        raise DemoError("the login page has no CSRF token")
    data = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": token.group(1), "username": username, "password": password, "next": "/admin/"}
    ).encode()
    with opener.open(f"{base}/admin/login/?next=/admin/", data, timeout=10) as response:
        if "/admin/login/" in response.geturl():
            raise DemoError("the demo staff user could not log in")
    for path in ("/", "/admin/"):
        try:
            with opener.open(f"{base}{path}", timeout=10) as response:
                page = response.read().decode(errors="replace")
                title = re.search(r"<title>(.*?)</title>", page, re.DOTALL)
                return PageCheck(f"{base}{path}", int(response.status), title.group(1).strip() if title else "")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise DemoError(f"{path} answered HTTP {exc.code}") from exc
    raise DemoError("neither the dashboard nor the admin answered")


def run(out: Output, *, base_dir: Path, serve: bool, port: int) -> DemoResult:
    demo_dir = base_dir / "var" / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    _recreate_databases(demo_dir)
    create_herald_tables(PHORGE_SCHEMA)
    out.write(f"Phorge's herald tables created in {demo_dir / 'phabricator_herald.sqlite3'} (from Phorge's DDL)\n")
    call_command("migrate", database="default", interactive=False, verbosity=0)
    username, password = create_staff_user()
    out.write(f"Django's own tables migrated; staff user {username!r} created with password {password}\n")

    store = Store()
    with DemoReceiver() as receiver:
        with store.connection.cursor() as cursor:
            seeded = seed(cursor, receiver, store.db_now())
        out.write(
            f"{len(seeded.hook_names)} hooks and {len(seeded.request_hooks)} queued requests written as Phorge "
            "writes them; a local receiver checks every X-Phabricator-Webhook-Signature\n"
        )
        store.close()
        deliver_once(base_dir, out, "pass 1")
        with store.connection.cursor() as cursor:
            print_requests(out, read_requests(cursor, seeded, receiver.attempts()))
        wait_for_retry(store, out)
        store.close()
        deliver_once(base_dir, out, "pass 2 (after the retry backoff)")
        with store.connection.cursor() as cursor:
            states = read_requests(cursor, seeded, receiver.attempts())
        print_requests(out, states)
        summary = summarize(states, receiver)
    print_summary(out, summary)

    server_port = port if serve else free_port()
    server = start_server(base_dir, server_port, None if serve else demo_dir / "runserver.log")
    try:
        page = check_pages(server_port, username, password)
        out.write(f"\nThe dashboard answered: {page.url} HTTP {page.status} ({page.title})\n")
        out.write(f"demo result: {json.dumps({**summary.as_dict(), 'page_status': page.status})}\n")
        if serve:
            out.write(
                f"\nDashboard: http://127.0.0.1:{server_port}/   Admin: http://127.0.0.1:{server_port}/admin/\n"
                f"Log in as {username!r} with password {password}\n"
                "Press Ctrl+C to stop.\n"
            )
            out.flush()
            try:
                server.wait()
            except KeyboardInterrupt:
                out.write("\nstopped\n")
    finally:
        stop_server(server)
    return DemoResult(summary, page, username, password)
