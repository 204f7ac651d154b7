"""A partitioned Phorge on two real MariaDB servers (issue 22): herald on server A (the suite's), maniphest,
user, config and repository on server B, started by the suite on its own port and data directory. Every
schema is on both, as `bin/storage upgrade` keeps it; the map is in both hoststate tables, as
`bin/storage partition` writes it; GORGE_WEBHOOK_CLUSTER_DATABASES (or cluster.databases in Phorge's local file)
tells the service how to reach B.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.support import testdb
from tests.support.golden import CASES, check_received, check_row
from tests.support.helpers import PHORGE_DB, Phorge, random_phid, worker_env
from tests.support.mariadb_servers import PrivateServer, mariadbd
from tests.support.phorge_app_db import AppDatabases
from tests.support.processes import manage
from tests.support.receiver import Receiver
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.locks import webhook_lock_name

pytestmark = [
    pytest.mark.slow,
    pytest.mark.database_server,
    pytest.mark.skipif(mariadbd() is None, reason="needs mariadb-server's mariadbd to start server B"),
]

NAMESPACE = settings.GORGE_WEBHOOK.namespace
LEASE = 7  # the attempt timeout (2 s) + 5 s
ON_B = ["maniphest", "user", "config", "repository"]


@pytest.fixture(scope="module")
def server_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    server = PrivateServer(tmp_path_factory.mktemp("master-b"))
    server.start()
    yield server
    server.remove()


def cluster_map(b: PrivateServer) -> list[dict[str, Any]]:
    a = testdb.server()
    return [
        {"host": a.host, "port": a.port, "role": "master", "partition": ["default"]},
        {"host": "127.0.0.1", "port": b.port, "role": "master", "partition": ON_B},
    ]


def once(cluster: Cluster, **env: str) -> list[str]:
    """One real `manage.py deliver_webhooks --once` with the production settings, told how to reach B by
    GORGE_WEBHOOK_CLUSTER_DATABASES as an administrator would; its log messages."""
    variables = {
        "GORGE_WEBHOOK_CLUSTER_DATABASES": json.dumps(cluster.databases),
        "GORGE_WEBHOOK_SILENT": "false",
        "GORGE_WEBHOOK_OUTBOUND_BLACKLIST": "",
        "GORGE_WEBHOOK_DELIVERY_TIMEOUT": "2",
        "GORGE_WEBHOOK_CLAIM_LEASE_SEC": str(LEASE),
        "GORGE_WEBHOOK_RETRY_BACKOFF_SEC": "1",
        "GORGE_WEBHOOK_ATTEMPT_LOG": "false",
        "LOG_FORMAT": "json",
    }
    done = manage("deliver_webhooks", "--once", env=worker_env(**(variables | env)))
    return [json.loads(line)["message"] for line in (done.stdout + done.stderr).splitlines() if line.startswith("{")]


@dataclasses.dataclass
class Cluster:
    a: AppDatabases  # the empty copies beside herald
    b: AppDatabases  # where maniphest, user, config and repository live
    server_b: PrivateServer
    databases: list[dict[str, Any]]  # cluster.databases


@pytest.fixture
def cluster(server_b: PrivateServer, worker_db: AppDatabases) -> Iterator[Cluster]:
    admin_b = server_b.server.connect()
    b = AppDatabases(admin_b, NAMESPACE)
    worker_db.create()
    b.create()
    databases = cluster_map(server_b)
    worker_db.partition_map(databases)
    b.partition_map(databases)
    yield Cluster(worker_db, b, server_b, databases)
    worker_db.partition_map(None)
    admin_b.close()
    if server_b.process is None:
        server_b.start()
    b.admin = admin_b = server_b.server.connect()  # a fresh one: the test may have restarted B
    b.drop()
    admin_b.close()


def _golden(name: str) -> dict[str, Any]:
    return next(case for case in CASES if case["name"] == name)


def _replay(case: dict[str, Any], phorge: Phorge, cluster: Cluster, **env: str) -> list[str]:
    """The golden case's attempts, each one `once(...)` run checked against Phorge's bytes; their log messages."""
    messages: list[str] = []
    with Receiver(hold_seconds=4) as receiver:
        hook = dict(case["hook_row"])
        hook["webhookURI"] = hook["webhookURI"].replace(":8765/", f":{receiver.port}/")
        phorge.insert_hook_row(hook)
        phorge.insert_request_row(case["request_before"])
        phid = case["request_before"]["phid"]
        for number, attempt in enumerate(case["attempts"]):
            if number:
                time.sleep(1.2)
            before = len(receiver.requests)
            started = time.time()
            messages += once(cluster, **env)
            check_received(receiver.requests[before:], attempt, receiver)
            check_row(phorge.row(phid), attempt["request_after"], started, time.time())
        assert phorge.row(phid)["properties"] == case["request_after"]["properties"]
    return messages


def _task_on_b(case: dict[str, Any], cluster: Cluster) -> None:
    """The case's task and the transactions its body carries, on B only (A holds empty copies)."""
    task = case["request_before"]["objectPHID"]
    cluster.b.task(task)
    body = json.loads(base64.b64decode(case["attempts"][0]["received"][0]["body_b64"]))
    sent = [x["phid"] for x in body["transactions"]]  # newest first, as Phorge's query read them
    for row_id, xaction in enumerate(reversed(sent), start=1):
        cluster.b.transaction("maniphest", "maniphest_transaction", task, row_id=row_id, phid=xaction)


@PHORGE_DB
def test_golden_task_on_b_gives_phorges_bytes_from_b_lookups(phorge: Phorge, cluster: Cluster) -> None:
    case = _golden("herald_rule_task_ok")
    _task_on_b(case, cluster)
    _replay(case, phorge, cluster)


@PHORGE_DB
def test_the_map_only_in_phorges_local_file_reaches_b_and_check_finds_no_master_unreachable(
    phorge: Phorge, cluster: Cluster, tmp_path: Path
) -> None:
    """Issue 28: no GORGE_WEBHOOK_CLUSTER_DATABASES; cluster.databases is read from conf/local/local.json."""
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"cluster.databases": cluster.databases, "phabricator.silent": False}, indent=4))
    env = {"GORGE_WEBHOOK_CLUSTER_DATABASES": "", "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG": str(local)}
    master_b = f"127.0.0.1:{cluster.server_b.port}"
    unread = manage("check", env=worker_env(GORGE_WEBHOOK_CLUSTER_DATABASES=""))  # the map nowhere it is read
    assert "gorge.W004" in unread.stderr and f"cannot reach: {master_b}" in unread.stderr

    case = _golden("herald_rule_task_ok")
    _task_on_b(case, cluster)
    messages = _replay(case, phorge, cluster, **env)
    hoststate = cluster.a.table("meta_data", "hoststate")
    assert (
        f"Phorge setting in force: cluster.databases = herald on {testdb.server().host}:{testdb.server().port}; "
        f"{master_b} (config, maniphest, repository, user), from the local file {local}, as in {hoststate}" in messages
    )
    assert not [m for m in messages if "cannot reach" in m or "hook locks on the repository" in m]
    checked = manage("check", env=worker_env(**env))
    assert "gorge.W004" not in checked.stderr and "cannot reach" not in checked.stdout + checked.stderr


@PHORGE_DB
def test_golden_user_object_on_b_gives_phorges_bytes(phorge: Phorge, cluster: Cluster) -> None:
    case = _golden("object_user_phid_type")
    user = case["request_before"]["objectPHID"]
    cluster.b.user(user)
    (xaction,) = json.loads(case["request_before"]["properties"])["transactionPHIDs"].values()
    cluster.b.transaction("user", "user_transaction", user, phid=xaction)
    _replay(case, phorge, cluster)


@PHORGE_DB
def test_golden_deleted_object_and_silent_mode_read_on_b(phorge: Phorge, cluster: Cluster) -> None:
    missing = _golden("missing_object")
    cluster.a.task(missing["request_before"]["objectPHID"])  # a stale row in A's copy: not to be believed
    _replay(missing, phorge, cluster)
    silent = _golden("silent_mode_config")
    cluster.a.config("phabricator.silent", "false")
    cluster.b.config("phabricator.silent", "true")  # `bin/config set` writes the config application's master
    _replay(silent, phorge, cluster, GORGE_WEBHOOK_SILENT="")


@PHORGE_DB
def test_a_live_object_on_b_is_delivered_with_bs_transactions(phorge: Phorge, cluster: Cluster) -> None:
    task = cluster.b.task()
    kept = [cluster.b.transaction("maniphest", "maniphest_transaction", task, row_id=n) for n in (1, 2)]
    stored = {"1": kept[0], "2": random_phid("XACT", "TASK"), "3": kept[1]}  # the second is not on B
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/b/ok"))
        phid = phorge.request(
            hook, object_phid=task, properties=seeding.properties(transactions=stored, triggers=[hook])
        )
        messages = once(cluster)
        assert len(receiver.requests) == 1
        body = json.loads(receiver.requests[0].body)
    assert [x["phid"] for x in body["transactions"]] == [kept[1], kept[0]]  # B's rows, newest first
    assert phorge.row(phid)["status"] == "sent"
    assert not [m for m in messages if "cannot reach" in m or "hook locks on the repository" in m]


@PHORGE_DB
def test_forty_hooks_at_once_hold_a_few_connections_on_b(phorge: Phorge, cluster: Cluster) -> None:
    with Receiver() as receiver:
        for index in range(40):
            phorge.request(phorge.hook(receiver.url(f"/many{index}/ok")), object_phid=cluster.b.task())
        query = "SHOW GLOBAL STATUS LIKE 'Max_used_connections'"
        cluster.b.execute("FLUSH STATUS")  # the high-water mark starts again from the connections open now
        once(cluster)
        assert len(receiver.requests) == 40
    ((_name, used),) = cluster.b.execute(query)
    # This test's admin connection, the worker's pool on B (2) and its lock session there.
    assert int(used) <= 1 + 2 + 1, used


@PHORGE_DB
def test_a_php_style_lock_on_b_excludes_the_service(phorge: Phorge, cluster: Cluster) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/locked/ok"))
        first = phorge.request(hook, object_phid=hook)
        name = webhook_lock_name(NAMESPACE, hook)
        php_on_a = testdb.server().connect()
        php_on_b = cluster.server_b.server.connect()
        try:
            with php_on_a.cursor() as cursor:
                cursor.execute("SELECT GET_LOCK(%s, 0)", (name,))  # not where Phorge locks: no effect
            with php_on_b.cursor() as cursor:
                cursor.execute("SELECT GET_LOCK(%s, 0)", (name,))
                assert cursor.fetchone() == (1,)
            once(cluster)
            assert receiver.requests == []
            assert phorge.row(first)["status"] == "queued"
            with php_on_b.cursor() as cursor:
                cursor.execute("SELECT RELEASE_LOCK(%s)", (name,))
            once(cluster)
            assert len(receiver.requests) == 1
            assert phorge.row(first)["status"] == "sent"
        finally:
            php_on_a.close()
            php_on_b.close()


@PHORGE_DB
def test_server_b_stopped_what_needs_a_goes_on_the_rest_waits(phorge: Phorge, cluster: Cluster) -> None:
    task = cluster.b.task()
    with Receiver() as receiver:
        hook_a = phorge.hook(receiver.url("/a/ok"))
        on_a = phorge.request(hook_a, object_phid=hook_a)  # a webhook object: herald's own tables, on A
        on_b = phorge.request(phorge.hook(receiver.url("/b/ok")), object_phid=task)
        cluster.server_b.stop()
        messages = once(cluster)
        assert [r.path for r in receiver.requests] == ["/a/ok"]
        assert phorge.row(on_a)["status"] == "sent"
        waiting = phorge.row(on_b)
        assert waiting["status"] == "queued" and waiting["lastRequestResult"] == "none"
        assert "errorType" not in waiting["properties"]
        assert any(
            m.startswith(f"Phorge's database master 127.0.0.1:{cluster.server_b.port} does not answer")
            for m in messages
        )
        assert any("delivering without the locks" in m for m in messages)
        assert not any(m.startswith("database unavailable") for m in messages)  # herald is fine

        cluster.server_b.start()
        time.sleep(LEASE + 1)  # the waiting row's claim runs out
        once(cluster)
        assert [r.path for r in receiver.requests] == ["/a/ok", "/b/ok"]
    assert phorge.row(on_b)["status"] == "sent"


@PHORGE_DB
def test_requeue_checks_objects_on_their_own_master(phorge: Phorge, cluster: Cluster) -> None:
    hook = phorge.hook("http://127.0.0.1:9/objects")
    now = phorge.now()
    failed = '{"retry":"never","transactionPHIDs":[],"triggerPHIDs":[],"errorType":"hook","errorCode":"object"}'
    columns = {"status": "failed", "properties": failed, "dateModified": now}
    alive = phorge.request(hook, object_phid=cluster.b.task(), **columns)  # alive on B, absent from A's copy
    stale = cluster.a.task()  # a stale row in A's copy: gone on B, where maniphest lives
    gone = phorge.request(hook, object_phid=stale, **columns)
    env = {"GORGE_WEBHOOK_CLUSTER_DATABASES": json.dumps(cluster.databases)}
    done = manage("requeue_webhooks", "--error", "hook", "--dry-run", env=worker_env(**env))
    assert alive in done.stdout and gone not in done.stdout and done.stdout.count("PHID-HWBR-") == 1
    assert "Left failed: 1 (object deleted in Phorge" in done.stdout

    cluster.server_b.stop()
    down = manage("requeue_webhooks", "--error", "hook", "--dry-run", env=worker_env(**env), ok=False)
    assert down.returncode != 0 and "does not answer: nothing was changed" in down.stderr
    assert "Traceback" not in down.stderr
    cluster.server_b.start()
