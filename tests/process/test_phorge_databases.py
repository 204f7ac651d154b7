"""phorge/databases.py with real processes: a deep partition map in hoststate is a problem said, not a crash,
and a configured master that does not answer makes its requests wait, with no password ever shown."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tests.support.helpers import PHORGE_DB, Phorge, random_phid, worker_env
from tests.support.phorge_app_db import AppDatabases
from tests.support.processes import manage
from tests.support.receiver import Receiver
from tests.support.urlwalk import DEEP, assert_every_page_stands


@PHORGE_DB
def test_a_deep_partition_map_in_hoststate_is_a_problem_said_not_a_crash(
    phorge: Phorge, worker_db: AppDatabases, admin_client: Any, settings: Any
) -> None:
    worker_db.create(["meta_data"])
    worker_db.execute(
        f"INSERT INTO {worker_db.table('meta_data', 'hoststate')} (stateKey, stateValue) VALUES (%s, %s)",
        ("cluster.databases", DEEP),
    )
    with Receiver() as receiver:
        phorge.request(phorge.hook(receiver.url("/deep/ok")))
        done = manage("deliver_webhooks", "--once", env=worker_env(), ok=False)
        assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-2000:]
        assert "cannot parse Phorge's partition map" in done.stderr
        assert len(receiver.requests) == 1
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token="t0ken")
    assert_every_page_stands(admin_client)


@PHORGE_DB
def test_an_unreachable_configured_master_waits_and_no_password_is_ever_shown(
    phorge: Phorge, worker_db: AppDatabases
) -> None:
    from tests.support import testdb
    from tests.support.helpers import worker_env
    from tests.support.processes import manage

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
