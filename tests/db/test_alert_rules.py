"""The Prometheus alerting rules shipped in docs/prometheus: promtool accepts them, its unit tests fire and
stay quiet as they should, and every metric they use is one this service really exports (scraped from the
web process's /metrics and from a worker's registry), with the labels the rules match and name.

Here: what runs on Django's test databases; the rest is in tests/unit/test_alert_rules.py,
tests/process/test_alert_rules.py."""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any

from django.test import Client
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from tests.support.docs import rules
from tests.support.helpers import PHORGE_DB, Phorge

# Exported by webhook_delivery.alerts (being written): checked against the scrape once that module exists.
EXPECTED_LATER = {"gorge_webhook_requests_near_collection", "gorge_webhook_requests_lost_to_collection_total"}


ALERTS_METRICS = "webhook_delivery.alerts.metrics"


METRIC = re.compile(r"\bgorge_webhook_[a-z0-9_]+\b")


SELECTOR = re.compile(r"\b(gorge_webhook_[a-z0-9_]+)\{([^}]*)\}")


MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=~?\s*"([^"]*)"')


LABEL_REF = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")


# `{{ with $labels.hook }} of hook {{ . }}{{ end }}`: said when the series has the label, left out when not
OPTIONAL_LABEL = re.compile(r"\{\{-?\s*with\s+\$labels\.[a-zA-Z_][a-zA-Z0-9_]*\s*-?\}\}.*?\{\{-?\s*end\s*-?\}\}", re.S)


TARGET_LABELS = {"instance", "job"}  # added by Prometheus to every scraped series


SUFFIXES = {"counter": ["_total", "_created"], "histogram": ["_bucket", "_sum", "_count", "_created"]}


def exported(text: str) -> dict[str, list[dict[str, str]]]:
    """{series name as Prometheus stores it: [label sets of its samples]} of an exposition."""
    names: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for suffix in SUFFIXES.get(family.type, [""]):
            names.setdefault(family.name + suffix, [])
        for sample in family.samples:
            names.setdefault(sample.name, []).append(dict(sample.labels))
    return names


def declared_labels(*modules: Any) -> dict[str, set[str]]:
    """Label names the worker's metrics are declared with (a labelled metric shows none before its first use)."""
    labels: dict[str, set[str]] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                for suffix in SUFFIXES.get(value._type, [""]):
                    labels[value._name + suffix] = set(value._labelnames)
    return labels


@PHORGE_DB
def test_every_metric_the_rules_use_is_exported_with_the_labels_they_match(phorge: Phorge) -> None:
    from webhook_delivery.worker import metrics as worker_metrics

    label_names = declared_labels(worker_metrics)
    registries = [REGISTRY]
    expected_later = set(EXPECTED_LATER)
    if importlib.util.find_spec(ALERTS_METRICS) is not None:  # imported before the default registry is read
        alerts_metrics = importlib.import_module(ALERTS_METRICS)
        label_names.update(declared_labels(alerts_metrics))
        registries += [value for value in vars(alerts_metrics).values() if isinstance(value, CollectorRegistry)]
        expected_later = set()
    web = Client().get("/metrics")
    assert web.status_code == 200
    names = exported(web.content.decode())
    worker = generate_latest(REGISTRY).decode()
    assert "gorge_webhook_deliveries" in worker  # the worker's own metrics are in the default registry
    for registry in registries:
        for name, samples in exported(generate_latest(registry).decode()).items():
            names.setdefault(name, []).extend(samples)
    for name, samples in names.items():
        for labels in samples:
            label_names.setdefault(name, set()).update(labels)

    used = set()
    for rule in rules():
        in_rule = set(METRIC.findall(rule["expr"]))
        used |= in_rule
        missing = in_rule - names.keys() - expected_later
        assert not missing, f"{rule['alert']} uses metrics nobody exports: {sorted(missing)}"
        for name, matchers in SELECTOR.findall(rule["expr"]):
            if name in expected_later:
                continue
            for label, value in MATCHER.findall(matchers):
                assert label in label_names.get(name, set()), f"{rule['alert']}: {name} has no label {label}"
                if names[name]:  # samples to look at: the value matched is one the service writes
                    assert value in {s.get(label) for s in names[name]}, f"{rule['alert']}: {name}{{{label}}}"
        texts = [OPTIONAL_LABEL.sub("", text) for text in rule["annotations"].values()]
        referenced = {ref for text in texts for ref in LABEL_REF.findall(text)}
        for label in referenced - TARGET_LABELS:
            if in_rule <= expected_later:
                continue
            assert any(label in label_names.get(name, set()) for name in in_rule), (
                f"{rule['alert']} names $labels.{label}, which none of {sorted(in_rule)} has"
            )
        if any("hook" in label_names.get(name, set()) for name in in_rule) or in_rule & EXPECTED_LATER:
            for key in ("summary", "description"):
                assert "$labels.hook" in rule["annotations"][key], f"{rule['alert']} {key} does not name the hook"
    assert EXPECTED_LATER <= used
    assert {
        "gorge_webhook_queue_oldest_due_age_seconds",
        "gorge_webhook_workers_alive",
        "gorge_webhook_queue_due_requests",
        "gorge_webhook_queue_hooks_in_backoff",
        "gorge_webhook_php_delivery",
        "gorge_webhook_attempt_log_lost_total",
        "gorge_webhook_degraded_events_total",
    } <= used
