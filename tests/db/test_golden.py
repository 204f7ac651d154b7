"""Replays every capture of Phorge's own PHP worker end to end and compares bytes, headers and rows."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.golden import CASES, NEEDS_PHORGE_LOOKUPS, check_received, check_row
from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.phorge_app_db import AppDatabases
from tests.support.receiver import Receiver
from webhook_delivery.config import default_blacklist
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB


def _phorge_side(case: dict[str, Any], databases: AppDatabases) -> None:
    app = NEEDS_PHORGE_LOOKUPS.get(case["name"])
    if app is None:
        return
    databases.create([app])  # for "config", empty: as on a standard install, the value is in local.json


def _run(config: Any) -> tuple[float, float]:
    started = time.time()
    build_worker(config, once=True).run()
    return started, time.time()


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_golden_case(
    case: dict[str, Any], phorge: Phorge, delivery_config: Any, app_databases: AppDatabases, tmp_path: Path
) -> None:
    _phorge_side(case, app_databases)
    with Receiver(hold_seconds=4) as receiver:
        hook = dict(case["hook_row"])
        hook["webhookURI"] = hook["webhookURI"].replace(":8765/", f":{receiver.port}/")
        phorge.insert_hook_row(hook)
        phorge.insert_request_row(case["request_before"])
        blacklist = default_blacklist() if case["name"] == "blocked_uri_default_blacklist" else ()
        config = dataclasses.replace(
            delivery_config, outbound_blacklist=blacklist, delivery_timeout=2.0, retry_backoff_sec=1
        )
        if NEEDS_PHORGE_LOOKUPS.get(case["name"]) == "config":
            # Where `bin/config set phabricator.silent true` puts it; nothing declared beside it.
            local = tmp_path / "local.json"
            local.write_text('{\n    "phabricator.silent": true\n}\n')
            config = dataclasses.replace(config, silent=None, phorge_local_config=str(local))
        phid = case["request_before"]["phid"]
        for number, attempt in enumerate(case["attempts"]):
            if number:
                time.sleep(1.2)
            before = len(receiver.requests)
            started, finished = _run(config)
            check_received(receiver.requests[before:], attempt, receiver)
            check_row(phorge.row(phid), attempt["request_after"], started, finished)
        assert phorge.row(phid)["properties"] == case["request_after"]["properties"]
