"""The golden captures of Phorge's PHP worker (tests/fixtures/golden) and how a delivery is checked against one."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.support import ROOT
from tests.support.receiver import Receiver

CASES = [json.loads(line) for line in (ROOT / "tests/fixtures/golden/cases.ndjson").read_text().splitlines()]


# Cases that need Phorge's other databases: the object's application tables, or its config table.
NEEDS_PHORGE_LOOKUPS = {"missing_object": "maniphest", "silent_mode_config": "config"}


TIME_COLUMNS = {"dateModified", "lastRequestEpoch"}


def check_received(got: list[Any], attempt: dict[str, Any], receiver: Receiver) -> None:
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


def check_row(row: dict[str, Any], expected: dict[str, Any], started: float, finished: float) -> None:
    for column, value in expected.items():
        if column not in TIME_COLUMNS:
            assert row[column] == value, column
    if expected["lastRequestEpoch"] == 0:
        assert row["lastRequestEpoch"] == 0
    else:
        assert int(started) <= row["lastRequestEpoch"] <= finished
    assert int(started) <= row["dateModified"] <= finished
