"""A partitioned Phorge the service is not configured for (issue 22, phorge/cluster.py and phorge/databases.py):
never a silent hook/object. The map is written into `<ns>_meta_data.hoststate` as `bin/storage partition`
does, with herald on one master and maniphest, user, config, worker and repository on another (nothing
connects there), beside empty copies of their tables. Parsing the map: tests/unit/test_cluster.py; two real
servers: tests/process/test_cluster.py."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from django.conf import settings

from tests.support.clock import FixedClock
from tests.support.cluster import CLUSTER, HERALD_MASTER, OTHER_MASTER, SINGLE, config_from, local_file
from tests.support.helpers import PHORGE_DB, Phorge, random_phid, with_event
from tests.support.mariadb_servers import MariaDBUser
from tests.support.phorge_app_db import AppDatabases
from tests.support.receiver import Receiver
from webhook_delivery import checks
from webhook_delivery.grants import grants_sql
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.cluster import parse_cluster_databases
from webhook_delivery.phorge.config import PhorgeSettings
from webhook_delivery.phorge.databases import PartitionMap, Placement
from webhook_delivery.phorge.objects import PhorgeObjects
from webhook_delivery.phorge.php_guard import PhpWorkerGuard
from webhook_delivery.worker.loop import build_worker

NAMESPACE = settings.GORGE_WEBHOOK.namespace


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
    elsewhere = [r for r in with_event(caplog.records, "objects.app_elsewhere") if r.application == "maniphest"]
    assert len(elsewhere) == 1 and elsewhere[0].master == OTHER_MASTER
    assert [r.master for r in with_event(caplog.records, "locks.elsewhere")] == [OTHER_MASTER]


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


def test_reachable_masters_leave_no_warning_and_only_unreached_ones_are_named() -> None:
    cluster = parse_cluster_databases(CLUSTER)
    assert Placement(cluster, reachable=frozenset({OTHER_MASTER})).warning() is None
    three = parse_cluster_databases([*CLUSTER, {"host": "db-c.example.org", "role": "master", "partition": ["file"]}])
    warning = Placement(three, reachable=frozenset({OTHER_MASTER})).warning()
    assert warning is not None and "db-c.example.org:3306 (file)" in warning and OTHER_MASTER not in warning
    assert "hook locks" not in warning  # repository's master is reached
    assert Placement(three, reachable=frozenset({OTHER_MASTER})).unreached("file") == "db-c.example.org:3306"
    assert Placement(three, reachable=frozenset({OTHER_MASTER})).unreached("maniphest") is None


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
    assert with_event(caplog.records, "cluster.disagrees")
    partitioned.partition_map(None)  # no row (or no grant): the variable is the map
    alone = PartitionMap(NAMESPACE, configured=parse_cluster_databases(moved)).current()
    assert alone.elsewhere("maniphest") == OTHER_MASTER and alone.elsewhere("user") is None


@PHORGE_DB
def test_the_local_files_map_reaches_the_master_check_finds_none_unreachable_and_a_change_waits_for_restart(
    partitioned: AppDatabases, tmp_path: Any, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from webhook_delivery.phorge.databases import Masters, herald_connection

    hoststate = partitioned.table("meta_data", "hoststate")
    path = local_file(tmp_path, {"cluster.databases": CLUSTER})
    cluster = config_from(path).delivery.cluster
    config = dataclasses.replace(settings.GORGE_WEBHOOK, cluster=cluster, phorge_local_config=path, silent=False)
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", config)
    assert not [m for m in checks.configuration() if m.id == "gorge.W004"]
    unset = dataclasses.replace(config, cluster=None, phorge_local_config="")
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", unset)
    (unreached,) = [m for m in checks.configuration() if m.id == "gorge.W004"]  # as when the file was not read
    assert f"(map from {hoststate}; herald on {HERALD_MASTER}; masters this service cannot reach" in unreached.msg
    assert "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG to Phorge's conf/local/local.json" in (unreached.hint or "")

    caplog.set_level(logging.INFO)
    clock = FixedClock(100.0)
    masters = Masters.single(NAMESPACE, herald_connection, configured=cluster)
    phorge_settings = PhorgeSettings(config, masters=masters, clock=clock)
    phorge_settings.current()
    placement = masters.partitions.current()
    assert placement.unreached("maniphest") is None and placement.warning() is None
    assert placement.origin == f"the local file {path}, as in {hoststate}"
    said = [r.getMessage() for r in with_event(caplog.records, "settings.in_force")]
    assert f"Phorge setting in force: cluster.databases = herald on {HERALD_MASTER}; {OTHER_MASTER} " in "".join(said)
    assert any(m.endswith(f", from the local file {path}, as in {hoststate}") for m in said)

    for changed in ([dict(CLUSTER[0]), {**CLUSTER[1], "pass": "new-secret"}, CLUSTER[2]], []):
        local_file(tmp_path, {"cluster.databases": changed})  # another size: a new stamp, whatever the clock
        clock.advance(6)  # past the file's recheck and the config cache
        phorge_settings.current()
    notes = [r.getMessage() for r in with_event(caplog.records, "settings.map_changed")]
    assert notes == [
        f"cluster.databases in {path} changed since start-up: the map read then (the local file {path}) stays in "
        "force until the service restarts"
    ]
    assert not any("new-secret" in r.getMessage() for r in caplog.records)
