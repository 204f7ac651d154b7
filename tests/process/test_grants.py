"""grants.py for real: a golden replay by a `deliver_webhooks` process whose MariaDB user holds only the
documented grants."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from tests.support.golden import CASES, NEEDS_PHORGE_LOOKUPS, TIME_COLUMNS
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin, worker_env
from tests.support.processes import manage
from tests.support.receiver import Receiver

pytestmark = PHORGE_DB
SKIPPED_HERE = {"blocked_uri_default_blacklist"}  # needs the default blacklist; test_golden covers it


@pytest.fixture
def restricted_user() -> Iterator[tuple[str, str]]:
    database = settings.DATABASES["phorge"]["NAME"]
    user, password = f"gw_least_{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    admin = mysql_admin()
    cursor = admin.cursor()
    cursor.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
    cursor.execute("CREATE USER %s@'localhost' IDENTIFIED BY %s", (user, password))
    for host in ("%", "localhost"):
        cursor.execute(f"GRANT SELECT ON `{database}`.`herald_webhook` TO %s@%s", (user, host))
        cursor.execute(f"GRANT SELECT, UPDATE ON `{database}`.`herald_webhookrequest` TO %s@%s", (user, host))
    try:
        yield user, password
    finally:
        cursor.execute("DROP USER IF EXISTS %s@'%%'", (user,))
        cursor.execute("DROP USER IF EXISTS %s@'localhost'", (user,))
        admin.close()


@pytest.mark.slow
def test_golden_replay_with_only_select_and_update_grants(phorge: Phorge, restricted_user: tuple[str, str]) -> None:
    user, password = restricted_user
    db = settings.DATABASES["phorge"]
    cases: list[dict[str, Any]] = [
        c for c in CASES if c["name"] not in NEEDS_PHORGE_LOOKUPS and c["name"] not in SKIPPED_HERE
    ]
    with Receiver(hold_seconds=4) as receiver:
        for case in cases:
            hook = dict(case["hook_row"])
            hook["webhookURI"] = hook["webhookURI"].replace(":8765/", f":{receiver.port}/")
            phorge.insert_hook_row(hook)
            phorge.insert_request_row(case["request_before"])
        env = worker_env(
            GORGE_WEBHOOK_DATABASE_URL=f"mysql://{user}:{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            GORGE_WEBHOOK_DELIVERY_TIMEOUT="2",
            GORGE_WEBHOOK_OUTBOUND_BLACKLIST="",
            LOG_FORMAT="json",
        )
        result = manage("deliver_webhooks", "--once", env=env, ok=False)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "denied" not in result.stderr.lower()
        bodies = {r.body for r in receiver.requests}
    for case in cases:
        expected = case["attempts"][0]
        row = phorge.row(case["request_before"]["phid"])
        for column, value in expected["request_after"].items():
            if column not in TIME_COLUMNS:
                assert row[column] == value, (case["name"], column)
        for received in expected["received"]:
            assert base64.b64decode(received["body_b64"]) in bodies, case["name"]
