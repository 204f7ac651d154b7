"""The Prometheus alerting rules shipped in docs/prometheus: promtool accepts them, its unit tests fire and
stay quiet as they should, and every metric they use is one this service really exports (scraped from the
web process's /metrics and from a worker's registry), with the labels the rules match and name.

Here: what needs no database and no server process; the rest is in tests/db/test_alert_rules.py,
tests/process/test_alert_rules.py."""

from __future__ import annotations

import re

from tests.support.docs import rules


def test_each_alert_has_a_severity_and_says_what_happened_without_a_uri() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        annotations = rule["annotations"]
        assert set(annotations) >= {"summary", "description"}, rule["alert"]
        for text in annotations.values():
            assert "://" not in text and not re.search(r"\$labels\.(uri|url|webhookURI)", text, re.I), rule["alert"]
