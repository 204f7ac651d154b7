"""Replays every capture of Phorge's own PHP worker end to end and compares bytes, headers and rows."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import PHORGE_DB, Phorge
from tests.phorge_app_db import AppDatabases
from tests.receiver import Receiver
from webhook_delivery.config import default_blacklist
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB

CASES = [json.loads(line) for line in (Path(__file__).parent / "fixtures/golden/cases.ndjson").read_text().splitlines()]
# Cases that need Phorge's other databases: the object's application tables, or its config table.
NEEDS_PHORGE_LOOKUPS = {"missing_object": "maniphest", "silent_mode_config": "config"}
TIME_COLUMNS = {"dateModified", "lastRequestEpoch"}


def _phorge_side(case: dict[str, Any], databases: AppDatabases) -> None:
    app = NEEDS_PHORGE_LOOKUPS.get(case["name"])
    if app is None:
        return
    databases.create([app])  # for "config", empty: as on a standard install, the value is in local.json


def _run(config: Any) -> tuple[float, float]:
    started = time.time()
    build_worker(config, once=True).run()
    return started, time.time()


def _check_received(got: list[Any], attempt: dict[str, Any], receiver: Receiver) -> None:
    expected = attempt["received"]
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.method == theirs["method"]
        assert ours.request_line == theirs["request_line"]
        assert ours.body == base64.b64decode(theirs["body_b64"])
        golden_headers = [
            (name, f"127.0.0.1:{receiver.port}" if name == "Host" else value) for name, value in theirs["headers"]
        ]
        assert ours.headers == golden_headers


def _check_row(row: dict[str, Any], expected: dict[str, Any], started: float, finished: float) -> None:
    for column, value in expected.items():
        if column not in TIME_COLUMNS:
            assert row[column] == value, column
    if expected["lastRequestEpoch"] == 0:
        assert row["lastRequestEpoch"] == 0
    else:
        assert int(started) <= row["lastRequestEpoch"] <= finished
    assert int(started) <= row["dateModified"] <= finished


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
            _check_received(receiver.requests[before:], attempt, receiver)
            _check_row(phorge.row(phid), attempt["request_after"], started, finished)
        assert phorge.row(phid)["properties"] == case["request_after"]["properties"]
