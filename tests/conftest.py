"""Fixtures: a real MariaDB database with Phorge's DDL, a real receiver, real worker processes. The
helpers they use are in tests/support/."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from tests.support.helpers import CHROMIUM, CHROMIUM_ARGS, Phorge, mysql_admin, throwaway_name, viewer
from tests.support.phorge_app_db import AppDatabases
from tests.support.processes import SiteDatabase
from tests.support.receiver import Receiver
from webhook_delivery.phorge.seeding import create_herald_tables
from webhook_delivery.reads import phorge_status


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker: Any) -> Iterator[None]:
    from django.test.utils import setup_databases, teardown_databases

    name = str(settings.DATABASES["phorge"]["NAME"])
    if not throwaway_name(name):
        pytest.exit(
            f"refusing to run: the test database would be {name!r}, which the suite did not generate "
            "(gwtest<pid>_herald); nothing was created or dropped. Set only GORGE_TEST_DATABASE_URL.",
            returncode=4,
        )
    admin = mysql_admin()
    cursor = admin.cursor()
    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    cursor.execute(f"USE `{name}`")
    create_herald_tables(cursor)
    with django_db_blocker.unblock():
        old = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    yield
    with django_db_blocker.unblock():
        for alias in connections:
            connections[alias].close()
        teardown_databases(old, verbosity=0)
    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()


@pytest.fixture
def app_databases() -> Iterator[AppDatabases]:
    """Phorge's other databases (`<namespace>_<app>`), created on demand and dropped afterwards."""
    namespace = settings.GORGE_WEBHOOK.namespace
    assert throwaway_name(f"{namespace}_herald"), f"refusing to create and drop {namespace}_* databases"
    admin = mysql_admin()
    databases = AppDatabases(admin, namespace)
    yield databases
    databases.drop()
    admin.close()


@pytest.fixture
def worker_db(app_databases: AppDatabases) -> Iterator[AppDatabases]:
    """Phorge's other databases, with the pages' cached PHP guard and settings fresh before and after."""
    phorge_status._php_guard.cache_clear()
    phorge_status._phorge_settings.cache_clear()
    phorge_status._masters.cache_clear()
    yield app_databases
    phorge_status._php_guard.cache_clear()
    phorge_status._phorge_settings.cache_clear()
    phorge_status._masters.cache_clear()


@pytest.fixture
def phorge(transactional_db: None) -> Iterator[Phorge]:
    helper = Phorge()
    helper.clear()
    yield helper
    helper.clear()


@pytest.fixture
def staff(client: Any, django_user_model: Any) -> Any:
    """The test client, logged in as a staff account that may see the delivery pages (helpers.viewer)."""
    client.force_login(viewer(django_user_model))
    return client


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(hold_seconds=6) as running:
        yield running


@pytest.fixture
def smtp() -> Iterator[Any]:
    """A real SMTP server on 127.0.0.1 (tests/alert_channels.Smtp), stopped at the end."""
    from tests.support.alert_channels import Smtp

    server = Smtp().start()
    yield server
    server.stop()


@pytest.fixture
def chat(receiver: Receiver) -> Iterator[Any]:
    """A chat webhook on the real receiver (tests/alert_channels.Chat), answered again at the end."""
    from tests.support.alert_channels import Chat

    channel = Chat(receiver)
    yield channel
    channel.answer()


@pytest.fixture
def delivery_config() -> Any:
    """The configured DeliveryConfig with fast test timings; tests replace() what they need."""
    return dataclasses.replace(settings.GORGE_WEBHOOK, delivery_timeout=3.0, claim_lease_sec=8)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Starts real `manage.py deliver_webhooks` processes (tests.support.processes.WorkerProcess), killed at the end."""
    from tests.support.processes import WorkerProcess

    started: list[WorkerProcess] = []

    def make(name: str, *args: str, kind: type[WorkerProcess] = WorkerProcess, **env: str) -> WorkerProcess:
        process = kind(tmp_path, name, *args, **env)
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()
        print(f"--- {process.log.name}\n" + process.log.read_text()[-4000:])  # shown when the test fails


@pytest.fixture(autouse=True)
def _fresh_web_metrics() -> None:
    """The web metrics are read at most once per few seconds; each test starts without a cached read."""
    from webhook_delivery.web.metrics import COLLECTOR

    COLLECTOR.forget()


@pytest.fixture
def chromium(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if not Path(CHROMIUM).is_file() or shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: install Debian's browser with `apt-get install -y chromium`")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the live server does the database work.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def site_database() -> Iterator[SiteDatabase]:
    """Django's own tables in a throwaway MariaDB database (gwtest<pid>_site), migrated once, for real
    processes that share them as a deployment does (workers, watchers, commands)."""
    from tests.support.settings import TEST_SERVER

    name = f"gwtest{os.getpid()}_site"
    admin = mysql_admin()
    cursor = admin.cursor()
    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    database = SiteDatabase(f"{TEST_SERVER}/{name}")
    database.command("migrate", "--noinput", "-v", "0")
    yield database
    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()


@pytest.fixture
def site(site_database: SiteDatabase) -> SiteDatabase:
    """That database, emptied of the rows an earlier test left: the one Django database that the test,
    its worker processes and its commands share."""
    admin = mysql_admin(site_database.name)
    cursor = admin.cursor()
    for table in (
        "delivery_alerts_alertcondition",
        "delivery_alerts_alertnotification",
        "delivery_alerts_alertchannel",
        "delivery_alerts_alerttask",
        "delivery_alerts_watchedrequest",
        "delivery_alerts_hookloss",
        "delivery_status_workerheartbeat",
        "delivery_status_hookhold",
        "delivery_status_operatoraction",
        "delivery_status_requeuenotice",
        "delivery_status_actionquota",
        "delivery_status_retryorder",
        "delivery_status_tallychunk",
        "delivery_status_heraldtally",
    ):
        cursor.execute(f"DELETE FROM `{table}`")
    admin.close()
    return site_database
