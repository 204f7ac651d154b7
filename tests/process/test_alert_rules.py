"""The Prometheus alerting rules shipped in docs/prometheus, run through promtool: it accepts them, and its
unit tests fire and stay quiet as they should. promtool comes with Debian's prometheus package, which only
`make test` installs: elsewhere these tests are skipped, in `make test` and CI a missing promtool fails them."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.support import ROOT
from tests.support.docs import RULES, rules

RULE_TESTS = ROOT / "docs" / "prometheus" / "gorge-webhook-rules.test.yml"


pytestmark = pytest.mark.needs_tool("promtool")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=RULES.parent, capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_rules() -> None:
    done = run("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_unit_tests_fire_and_stay_quiet_as_they_should() -> None:
    done = run("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = yaml.safe_load(RULE_TESTS.read_text())
    cases = [case for test in tested["tests"] for case in test.get("alert_rule_test", [])]
    for rule in rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case.get("exp_alerts") for case in mine), f"{rule['alert']}: no case where it fires"
        assert any(not case.get("exp_alerts") for case in mine), f"{rule['alert']}: no case where it stays quiet"
