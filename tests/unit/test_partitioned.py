"""A partitioned Phorge the service is not configured for (issue 22): never a silent hook/object.

The unit tests parse `cluster.databases` as Phorge does. The database tests write the map into
`<ns>_meta_data.hoststate` as `bin/storage partition` does, with herald on one master and maniphest, user,
config, worker and repository on another (nothing connects there), beside empty copies of their tables.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager as contextmanager_source
from contextlib import nullcontext
from typing import Any

import pytest
from django.conf import settings

from tests.helpers import PHORGE_DB, Phorge, random_phid
from tests.phorge_app_db import AppDatabases, php_json_encode
from tests.receiver import Receiver
from tests.test_phorge_databases import MariaDBUser
from webhook_delivery import checks
from webhook_delivery.grants import grants_sql
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.cluster import ClusterError, loads_cluster_databases, parse_cluster_databases
from webhook_delivery.phorge.config import PhorgeSettings
from webhook_delivery.phorge.databases import PartitionMap, Placement
from webhook_delivery.phorge.objects import PhorgeObjects
from webhook_delivery.phorge.php_guard import PhpWorkerGuard
from webhook_delivery.worker.loop import build_worker

HERALD_MASTER = "db-a.example.org:3306"
OTHER_MASTER = "db-b.example.org:3306"
ELSEWHERE = ["maniphest", "user", "config", "worker", "repository"]
CLUSTER: list[dict[str, Any]] = [
    {"host": "db-a.example.org", "role": "master", "port": 3306, "user": "svc/phorge", "pass": "secret-a"},
    {"host": "db-b.example.org", "role": "master", "port": 3306, "partition": ELSEWHERE},
    {"host": "db-a-r.example.org", "role": "replica", "port": 3306, "master": HERALD_MASTER, "persistent": False},
]
CLUSTER[0]["partition"] = ["default"]
SINGLE: list[dict[str, Any]] = [{"host": "db-a.example.org", "role": "master", "port": 3306}]
NAMESPACE = settings.GORGE_WEBHOOK.namespace


# -- cluster.databases, as Phorge reads it (no database) ---------------------------------------------


DOCS_EXAMPLE = [  # cluster_partitioning.diviner
    {"host": "db001.corporation.com", "role": "master", "user": "phorge", "port": 3306, "partition": ["default"]},
    {"host": "db002.corporation.com", "role": "replica", "port": 3306, "master": "db001.corporation.com:3306"},
    {"host": "db003.corporation.com", "role": "master", "port": 3306, "partition": ["file", "passphrase", "slowvote"]},
    {"host": "db004.corporation.com", "role": "replica", "port": 3306, "master": "db003.corporation.com:3306"},
]


def test_applications_resolve_to_their_partition_else_the_default_master() -> None:
    cluster = parse_cluster_databases(DOCS_EXAMPLE)
    assert cluster.partitioned
    assert [ref.ref_key for ref in cluster.enabled_masters()] == [
        "db001.corporation.com:3306",
        "db003.corporation.com:3306",
    ]
    master = cluster.master_for
    assert [master(app).ref_key for app in ("file", "slowvote", "herald", "maniphest")] == [  # type: ignore[union-attr]
        "db003.corporation.com:3306",
        "db003.corporation.com:3306",
        "db001.corporation.com:3306",
        "db001.corporation.com:3306",
    ]
    assert cluster.elsewhere("file") == "db003.corporation.com:3306"
    assert cluster.elsewhere("maniphest") is None  # the default partition, like herald
    assert [ref.master for ref in cluster.refs if not ref.is_master] == [
        "db001.corporation.com:3306",
        "db003.corporation.com:3306",
    ]


def test_a_disabled_master_sends_its_applications_to_the_default_one() -> None:
    entries = [dict(entry) for entry in DOCS_EXAMPLE]
    entries[2]["disabled"] = True
    cluster = parse_cluster_databases(entries)
    assert cluster.master_for("file").ref_key == "db001.corporation.com:3306"  # type: ignore[union-attr]
    assert not cluster.partitioned and cluster.elsewhere("file") is None  # one enabled master left


def test_a_single_master_is_the_default_and_not_partitioned() -> None:
    cluster = parse_cluster_databases([{"host": "db", "role": "master", "partition": ["maniphest"]}])
    assert not cluster.partitioned
    assert cluster.master_for("herald") == cluster.master_for("maniphest")
    assert cluster.master_for("herald").ref_key == "db:3306"  # type: ignore[union-attr]
    assert cluster.elsewhere("maniphest") is None
    assert not parse_cluster_databases([]).partitioned
    replica = parse_cluster_databases([*SINGLE, {"host": "r", "role": "replica"}]).refs[1]
    assert replica.master == "db-a.example.org:3306"  # unpartitioned: the first master


def test_without_a_default_an_unlisted_application_has_no_master() -> None:
    cluster = parse_cluster_databases(
        [{"host": "a", "role": "master", "partition": ["herald"]}, {"host": "b", "role": "master", "partition": []}]
    )
    assert cluster.master_for("maniphest") is None
    assert cluster.elsewhere("maniphest") == "no master"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("db001", "not a list"),
        ({"0": "a"}, "entry 0 is not a dictionary"),
        (["a"], "entry 0 is not a dictionary"),
        ([{"host": "a", "role": "master", "weight": 1}], "unknown key 'weight'"),
        ([{"role": "master"}], "missing the required key 'host'"),
        ([{"host": "a", "role": "primary"}], "neither 'master' nor 'replica'"),
        ([{"host": "a", "role": "master", "port": "3306"}], "'port' must be int"),
        ([{"host": "a", "role": "master", "port": True}], "'port' must be int"),
        ([{"host": "a", "role": "master", "disabled": 0}], "'disabled' must be bool"),
        ([{"host": "a", "role": "master", "partition": ["x", 1]}], "'partition' must be list<string>"),
        ([{"host": "a", "role": "master"}, {"host": "a", "role": "replica"}], "the host a: more than once"),
        ([{"host": "a", "role": "master"}, {"host": "a", "role": "replica", "port": 3306}], "a:3306 more than once"),
        (
            [{"host": "a", "role": "master", "partition": ["default"]}, {"host": "b", "role": "master"}],
            "b:3306 is missing",
        ),
        (
            [
                {"host": "a", "role": "master", "partition": ["default"]},
                {"host": "b", "role": "master", "partition": ["default"]},
            ],
            "more than one master is the default",
        ),
        (
            [
                {"host": "a", "role": "master", "partition": ["default", "file"]},
                {"host": "b", "role": "master", "partition": ["file"]},
            ],
            "'file' is in the partitions of a:3306 and b:3306",
        ),
        ([*SINGLE, {"host": "r", "role": "replica", "partition": []}], 'has a "partition" key'),
        ([*SINGLE, {"host": "r", "role": "replica", "master": "db-a.example.org"}], "not a configured master"),
        ([{"host": "r", "role": "replica"}], "lists no master"),
        (
            [
                {"host": "a", "role": "master", "partition": ["default"]},
                {"host": "b", "role": "master", "partition": []},
                {"host": "r", "role": "replica"},
            ],
            'replica r:3306 has no "master"',
        ),
    ],
)
def test_phorge_refuses_what_the_parser_refuses(value: Any, message: str) -> None:
    with pytest.raises(ClusterError) as caught:
        parse_cluster_databases(value)
    assert message in str(caught.value)


def test_the_hoststate_text_is_read_as_php_wrote_it() -> None:
    text = php_json_encode([{k: v for k, v in e.items() if k != "pass"} for e in CLUSTER])
    assert "svc\\/phorge" in text and "secret" not in text and ", " not in text
    cluster = loads_cluster_databases(text)
    assert cluster.elsewhere("worker") == OTHER_MASTER and cluster.elsewhere("herald") is None
    with pytest.raises(ClusterError, match="not valid JSON"):
        loads_cluster_databases("[{")


def test_the_warning_names_each_consequence() -> None:
    assert Placement().warning() is None and not Placement().partitioned
    assert Placement(parse_cluster_databases(SINGLE)).warning() is None
    warning = Placement(parse_cluster_databases(CLUSTER)).warning()
    assert warning is not None
    assert f"herald on {HERALD_MASTER}" in warning and OTHER_MASTER in warning
    assert "config, maniphest, repository, user, worker" in warning
    assert f"Phorge takes its hook locks on the repository application's master {OTHER_MASTER}" in warning
    unreadable = Placement(problem="cluster.databases is not a list of database hosts")
    assert unreadable.partitioned and unreadable.elsewhere("herald") is None
    assert unreadable.elsewhere("maniphest") is not None and "cannot be used" in (unreadable.warning() or "")


# -- on the suite's MariaDB -------------------------------------------------------------------------


@pytest.fixture
def partitioned(worker_db: AppDatabases) -> Iterator[AppDatabases]:
    """Empty copies of the other applications' tables on herald's server, and hoststate with the map."""
    worker_db.create()  # every schema is on every master (bin/storage upgrade)
    worker_db.partition_map(CLUSTER)
    yield worker_db
    worker_db.partition_map(None)


def _stored_state(apps: AppDatabases) -> str:
    return str(apps.execute(f"SELECT stateValue FROM {apps.table('meta_data', 'hoststate')}")[0][0])


@PHORGE_DB
def test_a_live_object_on_another_master_is_delivered_never_failed(
    phorge: Phorge, partitioned: AppDatabases, delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    assert '"user":"svc\\/phorge"' in _stored_state(partitioned) and "secret" not in _stored_state(partitioned)
    task = random_phid("TASK")  # alive on db-b; absent from the empty copy here
    stored = {"1": "PHID-XACT-TASK-aaaaaaaaaaaaaaa", "2": "PHID-XACT-TASK-bbbbbbbbbbbbbbb"}
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/partitioned/ok"))
        phid = phorge.request(
            hook, object_phid=task, properties=seeding.properties(transactions=stored, triggers=[hook])
        )
        build_worker(delivery_config, once=True).run()
        assert len(receiver.requests) == 1
        body = json.loads(receiver.requests[0].body)
    assert body["object"]["phid"] == task
    assert [t["phid"] for t in body["transactions"]] == list(reversed(stored.values()))  # stored, newest first
    assert phorge.row(phid)["status"] == "sent"
    messages = [r.getMessage() for r in caplog.records]
    elsewhere = [m for m in messages if m.startswith("Phorge's maniphest application is on another master")]
    assert len(elsewhere) == 1 and OTHER_MASTER in elsewhere[0]
    assert any(f"hook locks on the repository application's master {OTHER_MASTER}" in m for m in messages)


@PHORGE_DB
@pytest.mark.parametrize("databases", [None, SINGLE])
def test_without_a_partitioned_map_a_missing_object_fails_as_today(
    phorge: Phorge, worker_db: AppDatabases, delivery_config: Any, databases: list[dict[str, Any]] | None
) -> None:
    worker_db.create(["maniphest", "meta_data"])
    worker_db.partition_map(databases)
    try:
        with Receiver() as receiver:
            gone = phorge.request(phorge.hook(receiver.url("/single/ok")), object_phid=random_phid("TASK"))
            build_worker(delivery_config, once=True).run()
            assert receiver.requests == []
        assert phorge.row(gone)["properties"].endswith(',"errorType":"hook","errorCode":"object"}')
    finally:
        worker_db.partition_map(None)


@PHORGE_DB
def test_config_and_php_worker_elsewhere_are_not_read_from_the_empty_copies(partitioned: AppDatabases) -> None:
    partitioned.config("phabricator.silent", "false")  # a stale row in the copy here: not to be believed
    partitioned.worker_task()
    undeclared = dataclasses.replace(settings.GORGE_WEBHOOK, silent=None)
    resolved = PhorgeSettings(undeclared).current()
    assert resolved.silent.value is None and resolved.paused_reason() is not None  # still pauses, as today
    guard = PhpWorkerGuard(NAMESPACE)
    state = guard.current()
    assert state.state == "unknown" and "worker application is on another master" in state.detail
    assert OTHER_MASTER in state.detail
    assert guard.live_tasks([random_phid("HWBR")]) is None
    objects = PhorgeObjects(NAMESPACE)
    assert objects.transactions(random_phid("USER"), ["a", "b"]) == ["b", "a"]
    assert objects.transactions(random_phid("HWBH"), ["a"]) is None  # herald's own tables are still read

    partitioned.partition_map(None)
    assert PhorgeSettings(undeclared).silent() is False
    assert PhpWorkerGuard(NAMESPACE).current().state == "active"
    assert PhorgeObjects(NAMESPACE).transactions(random_phid("USER"), ["a"]) is None


@PHORGE_DB
def test_check_readiness_and_health_say_it(client: Any, partitioned: AppDatabases, monkeypatch: Any) -> None:
    token = "partition-t0ken"
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", dataclasses.replace(settings.GORGE_WEBHOOK, service_token=token))
    found = [m for m in checks.configuration() if m.id == "gorge.W004"]
    assert len(found) == 1 and OTHER_MASTER in found[0].msg and "hook locks" in found[0].msg
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ok" and "partitioned" in ready.json()["warning"]
    health = client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN=token).json()["data"]
    assert OTHER_MASTER in health["phorge_partitioned"]["warning"]

    partitioned.partition_map(None)
    from webhook_delivery.reads import phorge_status

    phorge_status._php_guard.cache_clear()
    phorge_status._masters.cache_clear()
    assert not [m for m in checks.configuration() if m.id == "gorge.W004"]
    assert "warning" not in client.get("/readyz").json()
    assert "phorge_partitioned" not in client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN=token).json()["data"]


@PHORGE_DB
def test_the_printed_grant_reads_the_map_and_without_it_nothing_is_assumed(partitioned: AppDatabases) -> None:
    text = grants_sql(NAMESPACE, "gorge", "%")
    assert f"GRANT SELECT ON `{NAMESPACE}_meta_data`.`hoststate` TO 'gorge'@'%';" in text
    assert "meta_data" not in grants_sql(NAMESPACE, "gorge", "%", optional=False)
    granted = MariaDBUser(partitioned.admin, f"{NAMESPACE}_pm", grants_sql(NAMESPACE, f"{NAMESPACE}_pm", "%"))
    blind = MariaDBUser(
        partitioned.admin, f"{NAMESPACE}_pmro", grants_sql(NAMESPACE, f"{NAMESPACE}_pmro", "%", optional=False)
    )
    try:
        placement = PartitionMap(NAMESPACE, connection=lambda: nullcontext(granted.connection)).current()
        assert placement.elsewhere("maniphest") == OTHER_MASTER
        # No grant: not known, so every lookup stays on herald's master as on a single server.
        assert PartitionMap(NAMESPACE, connection=lambda: nullcontext(blind.connection)).current() == Placement()
    finally:
        granted.drop()
        blind.drop()


# -- GORGE_WEBHOOK_CLUSTER_DATABASES, and the way to each master (no database) ----------------------


def _loaded(value: Any, url: str = "mysql://svc:herald%2Fpw@db-a.example.org:3306/phabricator_herald") -> Any:
    from webhook_delivery.config import load_config

    text = value if isinstance(value, str) else json.dumps(value)
    return load_config({"GORGE_WEBHOOK_DATABASE_URL": url, "GORGE_WEBHOOK_CLUSTER_DATABASES": text})


def test_the_variable_names_each_other_master_with_the_services_own_login_unless_the_entry_says() -> None:
    loaded = _loaded(CLUSTER)
    assert not loaded.errors
    assert loaded.delivery.cluster.elsewhere("maniphest") == OTHER_MASTER
    # Herald's master is the herald connection itself; B gets that connection's user and password.
    assert loaded.master_urls == {OTHER_MASTER: "mysql://svc:herald%2Fpw@db-b.example.org:3306/"}
    own = [dict(CLUSTER[0]), {**CLUSTER[1], "user": "lookups", "pass": "b-secret"}, CLUSTER[2]]
    assert _loaded(own).master_urls == {OTHER_MASTER: "mysql://lookups:b-secret@db-b.example.org:3306/"}
    for shown in (repr(_loaded(own)), repr(_loaded(own).delivery)):
        assert "b-secret" not in shown and "herald%2Fpw" not in shown and "secret-a" not in shown


@pytest.mark.parametrize(
    ("value", "url", "message"),
    [
        ("{not json", None, "not valid JSON"),
        ([{"host": "db-a", "role": "master", "pass": 7}], None, "'pass' must be string"),
        ([{**CLUSTER[1], "pass": "leaky-secret"}, {**CLUSTER[0], "partition": ["maniphest"]}], None, "maniphest"),
        (
            [
                {"host": "a", "role": "master", "partition": ["maniphest"]},
                {"host": "b", "role": "master", "partition": ["user"]},
            ],
            None,
            "no master serves herald",
        ),
        (CLUSTER, "sqlite:///demo.sqlite3", "needs a MySQL/MariaDB herald database"),
    ],
)
def test_a_bad_variable_is_a_configuration_error_that_shows_no_password(
    value: Any, url: str | None, message: str
) -> None:
    loaded = _loaded(value) if url is None else _loaded(value, url)
    (error,) = loaded.errors
    assert error.variable == "GORGE_WEBHOOK_CLUSTER_DATABASES" and message in error.message
    assert "secret" not in error.message and loaded.master_urls == {}


def test_reachable_masters_leave_no_warning_and_only_unreached_ones_are_named() -> None:
    cluster = parse_cluster_databases(CLUSTER)
    assert Placement(cluster, reachable=frozenset({OTHER_MASTER})).warning() is None
    three = parse_cluster_databases([*CLUSTER, {"host": "db-c.example.org", "role": "master", "partition": ["file"]}])
    warning = Placement(three, reachable=frozenset({OTHER_MASTER})).warning()
    assert warning is not None and "db-c.example.org:3306 (file)" in warning and OTHER_MASTER not in warning
    assert "hook locks" not in warning  # repository's master is reached
    assert Placement(three, reachable=frozenset({OTHER_MASTER})).unreached("file") == "db-c.example.org:3306"
    assert Placement(three, reachable=frozenset({OTHER_MASTER})).unreached("maniphest") is None


def test_a_master_that_does_not_answer_is_waited_for_then_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    from django.db import OperationalError

    from webhook_delivery.phorge.databases import MASTER_DOWN_SEC, Masters, MasterUnavailable

    class Fixed:
        def __init__(self, placement: Placement) -> None:
            self.placement = placement

        def current(self) -> Placement:
            return self.placement

    now = [1000.0]
    tries: list[str] = []

    @contextmanager_source
    def b_source() -> Iterator[Any]:
        tries.append("b")
        if down[0]:
            raise OperationalError(2003, "Can't connect")
        yield "connection to B"

    down = [True]
    placement = Placement(parse_cluster_databases(CLUSTER), reachable=frozenset({OTHER_MASTER}))
    herald = object()
    masters = Masters(
        Fixed(placement),
        lambda: herald,
        others=lambda ref: b_source if ref == OTHER_MASTER else None,
        clock=lambda: now[0],
    )  # type: ignore[arg-type, return-value]
    assert masters.route("herald").source is not None and masters.route("herald").master is None
    route = masters.route("maniphest")
    assert route.master == OTHER_MASTER and route.source is not None
    caplog.set_level(logging.INFO)
    for _ in range(3):
        with pytest.raises(MasterUnavailable), route.source():
            pass
    assert tries == ["b"]  # tried once, then waited for
    now[0] += MASTER_DOWN_SEC + 1
    down[0] = False
    with route.source() as connection:
        assert connection == "connection to B"
    messages = [r.getMessage() for r in caplog.records]
    assert sum("does not answer" in m for m in messages) == 1 and any("answers again" in m for m in messages)


@PHORGE_DB
def test_the_variable_must_agree_with_hoststate(partitioned: AppDatabases, caplog: pytest.LogCaptureFixture) -> None:
    agreeing = PartitionMap(NAMESPACE, configured=parse_cluster_databases(CLUSTER)).current()
    assert agreeing.elsewhere("maniphest") == OTHER_MASTER and agreeing.unreached("maniphest") is None
    assert agreeing.warning() is None
    moved = [dict(CLUSTER[0]), {**CLUSTER[1], "partition": ["maniphest"]}, CLUSTER[2]]  # user, config... not on B
    caplog.set_level(logging.INFO)
    placement = PartitionMap(NAMESPACE, configured=parse_cluster_databases(moved)).current()
    assert placement.unreached("maniphest") is not None and placement.unreached("user") is not None
    assert placement.unreached("herald") is None
    assert "places the applications otherwise" in (placement.warning() or "")
    assert any("no lookup outside herald is made" in r.getMessage() for r in caplog.records)
    partitioned.partition_map(None)  # no row (or no grant): the variable is the map
    alone = PartitionMap(NAMESPACE, configured=parse_cluster_databases(moved)).current()
    assert alone.elsewhere("maniphest") == OTHER_MASTER and alone.elsewhere("user") is None


@PHORGE_DB
def test_an_unreachable_configured_master_waits_and_no_password_is_ever_shown(
    phorge: Phorge, worker_db: AppDatabases
) -> None:
    from tests import testdb
    from tests.helpers import worker_env
    from tests.processes import manage

    suite = testdb.server()
    herald = {"host": suite.host, "port": suite.port, "role": "master", "partition": ["default"]}
    closed = {"host": "127.0.0.1", "port": 1, "role": "master", "partition": ["maniphest"], "user": "svc-b"}
    env = worker_env(
        GORGE_WEBHOOK_CLUSTER_DATABASES=json.dumps([herald, {**closed, "pass": "b-secret-pw"}]),
        GORGE_WEBHOOK_SILENT="false",
        GORGE_WEBHOOK_OUTBOUND_BLACKLIST="",
        GORGE_WEBHOOK_ATTEMPT_LOG="false",
    )
    with Receiver() as receiver:
        waiting = phorge.request(phorge.hook(receiver.url("/closed/ok")), object_phid=random_phid("TASK"))
        runs = [
            manage(*args, env=env, ok=False)
            for args in (["check"], ["deliver_webhooks", "--once"], ["requeue_webhooks", "--dry-run"])
        ]
        assert receiver.requests == []
    assert runs[0].returncode == 0 and runs[1].returncode == 0
    assert "Phorge's database master 127.0.0.1:1 does not answer" in runs[1].stdout + runs[1].stderr
    row = phorge.row(waiting)
    assert row["status"] == "queued" and "errorType" not in row["properties"]  # waits, never hook/object
    for run in runs:
        assert "b-secret-pw" not in run.stdout + run.stderr and "Traceback" not in run.stderr


# -- cluster.databases in Phorge's local file (GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG) ---------------------

HERALD_URL = "mysql://svc:herald%2Fpw@db-a.example.org:3306/phabricator_herald"


def _local(tmp_path: Any, values: dict[str, Any]) -> str:
    path = tmp_path / "local.json"
    path.write_text(json.dumps(values, indent=4) + "\n")  # as `bin/config set` writes it
    return str(path)


def _from(path: str, **env: str) -> Any:
    from webhook_delivery.config import load_config

    return load_config({"GORGE_WEBHOOK_DATABASE_URL": HERALD_URL, "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG": path, **env})


def test_the_local_files_map_is_used_as_the_variable_would_be(tmp_path: Any) -> None:
    path = _local(tmp_path, {"cluster.databases": CLUSTER, "phabricator.silent": False})
    loaded = _from(path)
    assert not loaded.errors
    cluster = loaded.delivery.cluster
    assert cluster.origin == f"the local file {path}" and loaded.master_variable == "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG"
    assert cluster.same_entries(_loaded(CLUSTER).delivery.cluster)
    assert (
        loaded.master_urls == _loaded(CLUSTER).master_urls == {OTHER_MASTER: f"mysql://svc:herald%2Fpw@{OTHER_MASTER}/"}
    )
    unset: list[dict[str, Any]] = [{}, {"cluster.databases": []}, {"phabricator.silent": True}]  # []: Phorge's default
    for values in unset:
        nothing = _from(_local(tmp_path, values))
        assert not nothing.errors and nothing.delivery.cluster is None and nothing.master_urls == {}
    missing = _from(str(tmp_path / "absent.json"))  # gorge.E002's to refuse, not load_config's
    assert not missing.errors and missing.delivery.cluster is None


def test_the_variable_wins_over_the_local_file(tmp_path: Any) -> None:
    moved = [dict(CLUSTER[0]), {**CLUSTER[1], "partition": ["maniphest"]}, CLUSTER[2]]
    bad = [{"host": "db-a", "role": "primary", "pass": "file-secret"}]
    for in_file in (CLUSTER, bad):
        loaded = _from(
            _local(tmp_path, {"cluster.databases": in_file}), GORGE_WEBHOOK_CLUSTER_DATABASES=json.dumps(moved)
        )
        assert not loaded.errors and loaded.master_variable == "GORGE_WEBHOOK_CLUSTER_DATABASES"
        assert loaded.delivery.cluster.origin == "the variable GORGE_WEBHOOK_CLUSTER_DATABASES"
        assert loaded.delivery.cluster.elsewhere("user") is None  # the variable's map, not the file's


@pytest.mark.parametrize(
    ("value", "url", "message"),
    [
        ({"0": {"host": "db-a", "role": "master", "pass": 7}}, None, "'pass' must be string"),
        ([{**CLUSTER[1], "pass": "leaky-secret"}, {**CLUSTER[0], "partition": ["maniphest"]}], None, "maniphest"),
        ([{**CLUSTER[0], "pass": "leaky-secret", "partition": ["file"]}, CLUSTER[1]], None, "no master serves herald"),
        ("db-a.example.org", None, "not a list of database hosts"),
        (CLUSTER, "sqlite:///demo.sqlite3", "needs a MySQL/MariaDB herald database"),
    ],
)
def test_a_bad_map_in_the_local_file_stops_start_up_naming_the_file_and_key_not_the_password(
    tmp_path: Any, value: Any, url: str | None, message: str
) -> None:
    from webhook_delivery.config import load_config

    path = _local(tmp_path, {"cluster.databases": value})
    env = {"GORGE_WEBHOOK_DATABASE_URL": url or HERALD_URL, "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG": path}
    loaded = load_config(env)
    (error,) = loaded.errors
    assert error.variable == "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG"
    assert str(error).startswith(f"GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG: cluster.databases in {path} is refused: ")
    assert message in error.message and "secret" not in str(error) and loaded.master_urls == {}
    assert loaded.delivery.cluster is None


def test_the_warning_and_the_start_up_line_say_where_the_map_came_from() -> None:
    hoststate = Placement(parse_cluster_databases(CLUSTER), origin="`ns_meta_data`.`hoststate`")
    warning = hoststate.warning() or ""
    assert "(map from `ns_meta_data`.`hoststate`; herald on" in warning
    assert "GORGE_WEBHOOK_CLUSTER_DATABASES or in cluster.databases of the local file" in warning
    assert hoststate.in_force() == (
        f"herald on {HERALD_MASTER}; {OTHER_MASTER} (config, maniphest, repository, user, worker)",
        "`ns_meta_data`.`hoststate`",
    )
    assert Placement(parse_cluster_databases(SINGLE), origin="x").in_force() == (
        f"herald on {HERALD_MASTER} (not partitioned)",
        "x",
    )
    assert Placement().in_force() is None and Placement(problem="unreadable").in_force() is None


@PHORGE_DB
def test_the_local_files_map_reaches_the_master_check_finds_none_unreachable_and_a_change_waits_for_restart(
    partitioned: AppDatabases, tmp_path: Any, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from webhook_delivery.phorge.databases import Masters, herald_connection

    hoststate = partitioned.table("meta_data", "hoststate")
    path = _local(tmp_path, {"cluster.databases": CLUSTER})
    cluster = _from(path).delivery.cluster
    config = dataclasses.replace(settings.GORGE_WEBHOOK, cluster=cluster, phorge_local_config=path, silent=False)
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", config)
    assert not [m for m in checks.configuration() if m.id == "gorge.W004"]
    unset = dataclasses.replace(config, cluster=None, phorge_local_config="")
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", unset)
    (unreached,) = [m for m in checks.configuration() if m.id == "gorge.W004"]  # as when the file was not read
    assert f"(map from {hoststate}; herald on {HERALD_MASTER}; masters this service cannot reach" in unreached.msg
    assert "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG to Phorge's conf/local/local.json" in (unreached.hint or "")

    caplog.set_level(logging.INFO)
    now = [100.0]
    masters = Masters.single(NAMESPACE, herald_connection, configured=cluster)
    phorge_settings = PhorgeSettings(config, masters=masters, clock=lambda: now[0])
    phorge_settings.current()
    placement = masters.partitions.current()
    assert placement.unreached("maniphest") is None and placement.warning() is None
    assert placement.origin == f"the local file {path}, as in {hoststate}"
    said = [r.getMessage() for r in caplog.records]
    assert f"Phorge setting in force: cluster.databases = herald on {HERALD_MASTER}; {OTHER_MASTER} " in "".join(said)
    assert any(m.endswith(f", from the local file {path}, as in {hoststate}") for m in said)

    for changed in ([dict(CLUSTER[0]), {**CLUSTER[1], "pass": "new-secret"}, CLUSTER[2]], []):
        _local(tmp_path, {"cluster.databases": changed})  # another size: a new stamp, whatever the clock
        now[0] += 6  # past the file's recheck and the config cache
        phorge_settings.current()
    notes = [r.getMessage() for r in caplog.records if "changed since start-up" in r.getMessage()]
    assert notes == [
        f"cluster.databases in {path} changed since start-up: the map read then (the local file {path}) stays in "
        "force until the service restarts"
    ]
    assert not any("new-secret" in r.getMessage() for r in caplog.records)
