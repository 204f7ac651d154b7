"""Objects by Phorge's names on the request page and in the admin (issue 28, item 7), against real MariaDB
databases with Phorge's DDL: the golden Herald-rule request for a Maniphest task, and the same row for a
Differential revision, commits in a repository with a callsign and in one without, and a paste."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import CaptureQueriesContext

from tests.support.golden import CASES
from tests.support.helpers import PHORGE_DB, Phorge, random_phid
from tests.support.mariadb_servers import MariaDBUser
from tests.support.phorge_app_db import AppDatabases
from webhook_delivery.grants import grants_sql
from webhook_delivery.phorge.databases import Masters, MasterUnavailable, Route
from webhook_delivery.phorge.object_names import READERS, ObjectNames
from webhook_delivery.phorge.objects import OBJECT_TABLES
from webhook_delivery.reads import object_names as web_names

pytestmark = [PHORGE_DB]

NAMESPACE = settings.GORGE_WEBHOOK.namespace
BASE_URI = "https://phorge.example.org"
LIST = "/admin/webhook_delivery/heraldwebhookrequest/"
LOGGER = "webhook_delivery.phorge.object_names"
GOLDEN = next(case for case in CASES if case["name"] == "herald_rule_task_ok")
APPS = ["maniphest", "differential", "repository", "paste"]
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'
HASH_XYZ = "a9caf12b3c4d5e6f708192a3b4c5d6e7f8091a2b"
HASH_XYZ_TWIN = "a9caf99999999999999999999999999999999999"  # shares "a9caf" with the first
HASH_R5 = "0badc0de0badc0de0badc0de0badc0de0badc0de"


@dataclasses.dataclass
class Golden:
    requests: dict[str, str]  # what the object is -> the request's PHID
    objects: dict[str, str]  # what the object is -> its PHID
    ids: dict[str, int]  # what the object is -> its id


@pytest.fixture(autouse=True)
def _fresh_names() -> Iterator[None]:
    web_names._resolver.cache_clear()
    yield
    web_names._resolver.cache_clear()


@pytest.fixture
def base_uri(settings: Any) -> str:
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, phorge_base_uri=BASE_URI)
    return BASE_URI


def _now(apps: AppDatabases) -> int:
    return int(apps.execute("SELECT UNIX_TIMESTAMP()")[0][0])


def _revision(apps: AppDatabases, title: str) -> tuple[str, int]:
    phid, now = random_phid("DREV"), _now(apps)
    row_id = apps.insert(
        "differential",
        "differential_revision",
        {
            "title": title,
            "phid": phid,
            "status": "needs-review",
            "summary": "",
            "testPlan": "",
            "dateCreated": now,
            "dateModified": now,
            "attached": "{}",
            "mailKey": b"m" * 40,
            "viewPolicy": "users",
            "editPolicy": "users",
            "properties": "{}",
            "activeDiffPHID": random_phid("DIFF"),
        },
    )
    return phid, row_id


def _repository(apps: AppDatabases, row_id: int, callsign: str | None, name: str) -> str:
    phid, now = random_phid("REPO"), _now(apps)
    apps.insert(
        "repository",
        "repository",
        {
            "id": row_id,
            "phid": phid,
            "name": name,
            "callsign": callsign,
            "versionControlSystem": "git",
            "details": "{}",
            "dateCreated": now,
            "dateModified": now,
            "viewPolicy": "users",
            "editPolicy": "users",
            "pushPolicy": "users",
        },
    )
    return phid


def _commit(apps: AppDatabases, repository_id: int, identifier: str, summary: str) -> tuple[str, int]:
    phid = random_phid("CMIT")
    row_id = apps.insert(
        "repository",
        "repository_commit",
        {
            "repositoryID": repository_id,
            "phid": phid,
            "commitIdentifier": identifier,
            "epoch": _now(apps),
            "auditStatus": "none",
            "summary": summary,
            "importStatus": 15,
        },
    )
    return phid, row_id


def _paste(apps: AppDatabases, title: str) -> tuple[str, int]:
    phid, now = random_phid("PSTE"), _now(apps)
    row_id = apps.insert(
        "paste",
        "paste",
        {
            "title": title,
            "phid": phid,
            "authorPHID": random_phid("USER"),
            "filePHID": random_phid("FILE"),
            "dateCreated": now,
            "dateModified": now,
            "editPolicy": "users",
            "status": "active",
        },
    )
    return phid, row_id


def _golden_request(phorge: Phorge, number: int, object_phid: str) -> str:
    """The golden request row, as another request (id, PHID) for `object_phid` when that is not its own."""
    row = dict(GOLDEN["request_before"])
    if object_phid != row["objectPHID"]:
        row.update(id=row["id"] + number, phid=random_phid("HWBR"), objectPHID=object_phid)
    phorge.insert_request_row(row)
    return str(row["phid"])


@pytest.fixture
def golden(phorge: Phorge, worker_db: AppDatabases) -> Golden:
    worker_db.create(APPS)
    phorge.insert_hook_row(GOLDEN["hook_row"])
    task = GOLDEN["request_before"]["objectPHID"]
    worker_db.task(task, title=f"Fix the login {HOSTILE}")
    ((task_id,),) = worker_db.execute(f"SELECT id FROM {worker_db.table('maniphest', 'maniphest_task')}")
    _repository(worker_db, 4, "XYZ", "Web site")
    _repository(worker_db, 5, None, "Tools")
    objects = {"task": (task, int(task_id))}
    objects["revision"] = _revision(worker_db, "Add the tests")
    objects["commit"] = _commit(worker_db, 4, HASH_XYZ, "Repair the build")
    _commit(worker_db, 4, HASH_XYZ_TWIN, "Another commit")
    objects["commit without callsign"] = _commit(worker_db, 5, HASH_R5, "")
    objects["paste"] = _paste(worker_db, "notes")
    requests = {what: _golden_request(phorge, n, phid) for n, (what, (phid, _id)) in enumerate(objects.items())}
    return Golden(
        requests, {what: phid for what, (phid, _id) in objects.items()}, {w: i for w, (_p, i) in objects.items()}
    )


def _expected_links(golden: Golden) -> dict[str, str]:
    """The object as the pages show it with the base URI: the name linked, then the rest of the full name."""
    task, revision, paste = golden.ids["task"], golden.ids["revision"], golden.ids["paste"]
    link = '<a href="' + BASE_URI + '{}" rel="noreferrer">{}</a>{}'
    return {
        "task": link.format(
            f"/T{task}",
            f"T{task}",
            ": Fix the login &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;",
        ),
        "revision": link.format(f"/D{revision}", f"D{revision}", ": Add the tests"),
        "commit": link.format(f"/rXYZ{HASH_XYZ}", "rXYZa9caf12b3c4d", ": Repair the build"),
        "commit without callsign": link.format(f"/R5:{HASH_R5}", "R5:0badc0de0bad", ""),
        "paste": link.format(f"/P{paste}", f"P{paste}", " notes"),
    }


def test_the_request_page_names_and_links_each_golden_object(admin_client: Any, golden: Golden, base_uri: str) -> None:
    for what, expected in _expected_links(golden).items():
        html = admin_client.get(f"/requests/{golden.requests[what]}/").content.decode()
        (shown,) = re.findall(r'<dd id="object">(.*?)</dd>', html, re.DOTALL)
        assert shown == f"{expected} <code>{golden.objects[what]}</code>", what
        assert "<script>alert" not in html and "<b>bold" not in html


def test_without_the_base_uri_the_name_is_not_linked(admin_client: Any, golden: Golden) -> None:
    html = admin_client.get(f"/requests/{golden.requests['revision']}/").content.decode()
    (shown,) = re.findall(r'<dd id="object">(.*?)</dd>', html, re.DOTALL)
    assert shown == f"D{golden.ids['revision']}: Add the tests <code>{golden.objects['revision']}</code>"


def test_the_admin_list_names_a_whole_page_with_one_query_per_application(
    admin_client: Any, golden: Golden, base_uri: str
) -> None:
    with CaptureQueriesContext(connections["phorge"]) as captured:
        html = admin_client.get(LIST).content.decode()
    for what, expected in _expected_links(golden).items():
        assert f'{expected}<br><code style="font-size:11px;white-space:nowrap">{golden.objects[what]}</code>' in html
    statements = [query["sql"] for query in captured.captured_queries]
    for app in APPS:
        assert len([sql for sql in statements if f"{NAMESPACE}_{app}`" in sql]) == 1, app
    with CaptureQueriesContext(connections["phorge"]) as again:
        admin_client.get(LIST)
    assert not [query for query in again.captured_queries if f"{NAMESPACE}_maniphest`" in query["sql"]]  # cached
    form = admin_client.get(f"{LIST}{GOLDEN['request_before']['id']}/change/").content.decode()
    assert _expected_links(golden)["task"] in form


def _found(admin_client: Any, golden: Golden, term: str) -> set[str]:
    response = admin_client.get(LIST, {"q": term})
    assert response.status_code == 200
    html = response.content.decode()
    return {what for what, phid in golden.requests.items() if phid in html}


def test_the_admin_search_finds_the_requests_of_a_monogram(admin_client: Any, golden: Golden, phorge: Phorge) -> None:
    # An object's requests are searched among the last day's (request_lists.SEARCH_DAYS): the golden rows
    # were captured long ago.
    phorge.execute("UPDATE herald_webhookrequest SET dateCreated = UNIX_TIMESTAMP()")
    task, revision, paste = golden.ids["task"], golden.ids["revision"], golden.ids["paste"]
    for term, expected in [
        (f"T{task}", {"task"}),
        (f"t{task}", {"task"}),
        (f"  D{revision} ", {"revision"}),
        (f"P{paste}", {"paste"}),
        ("rXYZa9caf12", {"commit"}),
        (f"rXYZ{HASH_XYZ}", {"commit"}),
        ("rXYZ:a9caf12b", {"commit"}),
        ("R4:a9caf12", {"commit"}),
        ("R5:0badc", {"commit without callsign"}),
        ("0badc0de", {"commit without callsign"}),  # a bare hash of 7 or more, as Phorge
        (f"T{task} P{paste}", {"task", "paste"}),
    ]:
        assert _found(admin_client, golden, term) == expected, term
    for term in ["T99999", f"D{revision + 1000}", "rXYZa9caf", "rNOPEa9caf12", "R99:a9caf12", "0badc0", "F7", "M3"]:
        assert _found(admin_client, golden, term) == set(), term  # rXYZa9caf is ambiguous, as in Phorge


def test_an_object_deleted_or_out_of_reach_is_shown_by_its_phid(
    admin_client: Any, phorge: Phorge, worker_db: AppDatabases, base_uri: str
) -> None:
    phorge.insert_hook_row(GOLDEN["hook_row"])
    request = _golden_request(phorge, 0, GOLDEN["request_before"]["objectPHID"])
    task = GOLDEN["request_before"]["objectPHID"]
    for step in ("no database", "deleted"):
        web_names._resolver.cache_clear()
        response = admin_client.get(f"/requests/{request}/")
        assert response.status_code == 200, step
        (shown,) = re.findall(r'<dd id="object">(.*?)</dd>', response.content.decode(), re.DOTALL)
        assert shown == f"TASK <code>{task}</code>", step
        listing = admin_client.get(LIST).content.decode()
        assert f'TASK<br><code style="font-size:11px;white-space:nowrap">{task}</code>' in listing, step
        assert admin_client.get(LIST, {"q": "T1"}).status_code == 200
        if step == "no database":
            worker_db.create(["maniphest"])  # and no task in it


def test_without_the_grant_nothing_is_named_and_it_is_said_once(
    phorge: Phorge, worker_db: AppDatabases, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    worker_db.create(["maniphest"])
    task = worker_db.task(title="secret")
    user = MariaDBUser(worker_db.admin, f"{NAMESPACE}_nm", grants_sql(NAMESPACE, f"{NAMESPACE}_nm", optional=False))
    try:
        resolver = ObjectNames(NAMESPACE, Masters.single(NAMESPACE, lambda: nullcontext(user.connection)))
        for _ in range(2):
            assert resolver.names([task, random_phid("TASK")]) == {}
            assert resolver.find("T1") == []
    finally:
        user.drop()
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert said == [
        f"cannot read `{NAMESPACE}_maniphest`.`maniphest_task` (no SELECT grant, or no such table): "
        "those objects are shown by their PHID"
    ]
    granted = ObjectNames(NAMESPACE, Masters.single(NAMESPACE, lambda: nullcontext(connections["phorge"])))
    assert granted.names([task])[task].full_name.endswith(": secret")


class _Stub:
    """Masters as a partitioned Phorge's look from here: every application elsewhere, or its master down."""

    def __init__(self, route: Route) -> None:
        self._route = route

    def route(self, application: str) -> Route:
        return self._route


@contextmanager
def _down() -> Iterator[Any]:
    raise MasterUnavailable("db-b:3306")
    yield


def test_on_sqlite_or_other_masters_there_are_no_names_and_no_errors(worker_db: AppDatabases) -> None:
    worker_db.create(["maniphest"])
    task = worker_db.task()
    sqlite = ObjectNames(NAMESPACE, Masters.single(NAMESPACE, lambda: nullcontext(connections["default"])))
    elsewhere = ObjectNames(NAMESPACE, _Stub(Route(None, "db-b:3306")))  # type: ignore[arg-type]
    down = ObjectNames(NAMESPACE, _Stub(Route(_down, "db-b:3306")))  # type: ignore[arg-type]
    for resolver in (sqlite, elsewhere, down):
        assert resolver.names([task]) == {}
        assert resolver.find("T1 rXYZabcde @alice") == []


def test_every_type_is_read_from_phorges_tables_in_one_statement_per_application(
    phorge: Phorge, worker_db: AppDatabases, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    worker_db.create()
    repository = _repository(worker_db, 4, "XYZ", "Web site")
    commit, _id = _commit(worker_db, 4, HASH_XYZ, "Repair the build")
    hook = phorge.hook("http://127.0.0.1:9/x", name="named hook")
    gone = [random_phid(phid_type) for phid_type in READERS]
    resolver = ObjectNames(NAMESPACE, Masters.single(NAMESPACE, lambda: nullcontext(connections["phorge"])))
    with CaptureQueriesContext(connections["phorge"]) as captured:
        named = resolver.names([commit, repository, hook, *gone])  # NULL-first columns in the UNION
    assert {phid: name.full_name for phid, name in named.items()} == {
        repository: "rXYZ Web site",
        commit: "rXYZa9caf12b3c4d: Repair the build",
        hook: f"Webhook {_hook_id(phorge, hook)} named hook",
    }
    statements = [query["sql"] for query in captured.captured_queries if "phid IN" in query["sql"]]
    apps = {OBJECT_TABLES[phid_type].object_app for phid_type in READERS}
    assert len(statements) == len(apps)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []


def _hook_id(phorge: Phorge, hook: str) -> int:
    ((row_id,),) = phorge.execute("SELECT id FROM herald_webhook WHERE phid = %s", [hook])
    return int(row_id)
