"""One user's posts taken by eight web workers at the same moment (records/actions.ask): the limit is counted in
one step with the write, on MariaDB and on SQLite alike, so exactly PER_USER actions are written, never more
(before, a count and then an insert let one user make 11 of 10)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.helpers import PHORGE_DB, Phorge, failed, worker_env
from tests.support.processes import SiteDatabase, manage
from tests.support.web_process import select_only_user, staff_account, web_process
from webhook_delivery.records.actions import PER_USER

pytestmark = [PHORGE_DB, pytest.mark.slow]

ALICE = ("alice-operator", "pw-alice-operator-1")
RACING = 8


@pytest.fixture(params=["mariadb", "sqlite"])
def django_database(request: pytest.FixtureRequest, site: SiteDatabase, tmp_path: Path) -> Iterator[SiteDatabase]:
    if request.param == "mariadb":
        yield site
        return
    sqlite = SiteDatabase(f"sqlite:///{tmp_path / 'site.sqlite3'}")
    manage("migrate", "--noinput", "-v", "0", env=worker_env(**sqlite.env))
    yield sqlite


def signed_in(base: str) -> requests.Session:
    session = requests.Session()
    form = session.get(f"{base}/admin/login/", timeout=10).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None
    answer = session.post(
        f"{base}/admin/login/?next=/",
        data={"csrfmiddlewaretoken": token[1], "username": ALICE[0], "password": ALICE[1]},
        timeout=10,
    )
    assert answer.status_code == 200 and answer.url == f"{base}/", answer.url
    return session


def test_eight_web_workers_take_one_users_posts_at_once_and_write_exactly_the_limit(
    phorge: Phorge, django_database: SiteDatabase, tmp_path: Path
) -> None:
    staff_account(django_database, *ALICE, "view_heraldwebhookrequest", "operate_webhooks")
    hook = phorge.hook("http://127.0.0.1:9/x")
    earlier = [failed(phorge, hook) for _ in range(PER_USER - 4)]
    racing = [failed(phorge, hook) for _ in range(RACING)]
    with select_only_user() as phorge_url, web_process(django_database, tmp_path, phorge_url, workers=RACING) as base:
        session = signed_in(base)
        csrf = session.cookies["csrftoken"]

        def post(request: str) -> int:
            form = {"csrfmiddlewaretoken": csrf, "form_key": f"race-{request[-20:]}"}
            answer = session.post(f"{base}/requests/{request}/requeue/", data=form, allow_redirects=False, timeout=30)
            return answer.status_code

        assert [post(request) for request in earlier] == [303] * len(earlier)
        start = threading.Barrier(RACING)
        statuses: list[int] = []
        lock = threading.Lock()

        def race(request: str) -> None:
            start.wait()
            status = post(request)
            with lock:
                statuses.append(status)

        threads = [threading.Thread(target=race, args=(request,)) for request in racing]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert sorted(statuses) == [303] * 4 + [429] * 4, statuses
    if django_database.url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(django_database.url.removeprefix("sqlite:///")) as check:
            written = check.execute("SELECT COUNT(*) FROM delivery_status_operatoraction").fetchone()[0]
    else:
        written = django_database.sql("SELECT COUNT(*) FROM delivery_status_operatoraction")[0][0]
    assert written == PER_USER
