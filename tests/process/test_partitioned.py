"""A partitioned Phorge the service is not configured for (issue 22): never a silent hook/object.

The unit tests parse `cluster.databases` as Phorge does. The database tests write the map into
`<ns>_meta_data.hoststate` as `bin/storage partition` does, with herald on one master and maniphest, user,
config, worker and repository on another (nothing connects there), beside empty copies of their tables.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_partitioned.py,
tests/db/test_partitioned.py."""

from __future__ import annotations

import json

from tests.support.helpers import PHORGE_DB, Phorge, random_phid
from tests.support.phorge_app_db import AppDatabases
from tests.support.receiver import Receiver


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
