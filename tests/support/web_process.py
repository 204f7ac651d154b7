"""A real web process for the tests: gunicorn serving the production settings (DEBUG off, the static files
collected, as the image has them) against Django's tables in the `site` database that the workers share,
and Phorge's herald database through a MariaDB user of the test's choosing (one with only SELECT, to show
that the pages never write Phorge's tables)."""

from __future__ import annotations

import re
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from django.conf import settings

from tests.support import ROOT
from tests.support.helpers import mysql_admin, worker_env
from tests.support.processes import SiteDatabase, manage
from tests.support.waiting import wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def select_only_user() -> Iterator[str]:
    """A MariaDB user with SELECT on Phorge's two herald tables and nothing else: the URL of the herald
    database as that user."""
    database = settings.DATABASES["phorge"]
    user, password = f"gw_pages_{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    admin = mysql_admin()
    cursor = admin.cursor()
    try:
        for host in ("%", "localhost"):
            cursor.execute("CREATE USER %s@%s IDENTIFIED BY %s", (user, host, password))
            for table in ("herald_webhook", "herald_webhookrequest"):
                cursor.execute(f"GRANT SELECT ON `{database['NAME']}`.`{table}` TO %s@%s", (user, host))
        yield f"mysql://{user}:{password}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    finally:
        for host in ("%", "localhost"):
            cursor.execute("DROP USER IF EXISTS %s@%s", (user, host))
        admin.close()


def _answers(base: str) -> bool:
    try:
        return requests.get(f"{base}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@contextmanager
def web_process(
    site: SiteDatabase, tmp: Path, phorge_url: str, *, cwd: Path = ROOT, workers: int = 1, **env_overrides: str
) -> Iterator[str]:
    """gunicorn on a free local port (`workers` processes), from the checkout `cwd`; yields its base URL,
    prints the tail of its log when it stops."""
    (tmp / "web_settings.py").write_text(
        f"from gorge_site.settings import *  # noqa: F403\nSTATIC_ROOT = {str(tmp / 'static')!r}\n"
    )
    env = worker_env(
        **site.env,
        GORGE_WEBHOOK_DATABASE_URL=phorge_url,
        DJANGO_SETTINGS_MODULE="web_settings",
        PYTHONPATH=str(tmp),
        LOG_FORMAT="json",
        **env_overrides,
    )
    manage("collectstatic", "--noinput", "--verbosity", "0", env=env, cwd=cwd)
    port = free_port()
    log_path = tmp / "web.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "gunicorn", "gorge_site.wsgi:application"),
                *("--bind", f"127.0.0.1:{port}", "--workers", str(workers)),
            ],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base) or process.poll() is not None, 60, "the web process")
        assert process.poll() is None, log_path.read_text()[-3000:]
        yield base
    finally:
        process.terminate()
        process.wait(30)
        print("--- web.log\n" + log_path.read_text()[-4000:])


def staff_account(site: SiteDatabase, username: str, password: str, *codenames: str, cwd: Path = ROOT) -> None:
    """A staff account in the site database with exactly these permissions (created, or reset), made by the
    checkout `cwd`."""
    code = (
        "from django.contrib.auth.models import Permission, User\n"
        f"user, _ = User.objects.get_or_create(username={username!r})\n"
        f"user.is_staff, user.is_active = True, True\n"
        f"user.set_password({password!r})\n"
        "user.save()\n"
        f"user.user_permissions.set(Permission.objects.filter(codename__in={list(codenames)!r}))\n"
    )
    site.command("shell", "-c", code, cwd=cwd)


def logged_in(base: str, username: str, password: str) -> requests.Session:
    """A session signed in through the admin's login form of the web process at `base`, as a browser does."""
    session = requests.Session()
    page = session.get(f"{base}/admin/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf is not None, (page.status_code, page.url, page.text[:600])
    done = session.post(
        f"{base}/admin/login/?next=/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf[1]},
        headers={"Referer": f"{base}/admin/login/"},
        timeout=10,
    )
    assert done.status_code == 200 and "sessionid" in session.cookies, (done.status_code, done.text[:600])
    return session
