"""The version, read once from pyproject.toml (webhook_delivery/version.py), and where it is told."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from django.core.management import load_command_class
from prometheus_client import generate_latest

from tests.support import ROOT
from webhook_delivery.version import FORMAT, UNKNOWN, VERSION, read


def test_the_version_is_pyprojects_and_a_semantic_one() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert VERSION == declared and read() == (declared, None)
    assert FORMAT.fullmatch(VERSION)


@pytest.mark.parametrize("value", ["0.2.0", "1.10.3", "0.3.0.dev0", "2.0.0.dev12"])
def test_release_and_development_versions_are_read(tmp_path: Path, value: str) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[project]\nname = "x"\nversion = "{value}"\n')
    assert read(path) == (value, None)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "cannot be read (FileNotFoundError)"),
        ("[project\n", "cannot be read (TOMLDecodeError)"),
        ('[project]\nname = "x"\n', "is not a version like"),
        ('[project]\nversion = "0.2"\n', "is not a version like"),
        ('[project]\nversion = "v0.2.0"\n', "is not a version like"),
        ('[project]\nversion = "0.3.0-dev"\n', "is not a version like"),
        ("[project]\nversion = 2\n", "is not a version like"),
    ],
)
def test_an_unreadable_version_is_unknown_with_the_reason(tmp_path: Path, text: str | None, says: str) -> None:
    path = tmp_path / "pyproject.toml"
    if text is not None:
        path.write_text(text)
    version, problem = read(path)
    assert version == UNKNOWN and problem is not None and says in problem and str(path) in problem


def test_deliver_webhooks_version_prints_this_trees_version(capsys: pytest.CaptureFixture[str]) -> None:
    parser = load_command_class("webhook_delivery", "deliver_webhooks").create_parser("manage.py", "deliver_webhooks")
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{VERSION}\n"


def test_the_workers_metrics_carry_build_info() -> None:
    from prometheus_client import REGISTRY
    from prometheus_client.parser import text_string_to_metric_families

    import webhook_delivery.worker.metrics  # noqa: F401  (what deliver_webhooks --metrics-port serves)

    samples = [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(generate_latest(REGISTRY).decode())
        if family.name == "gorge_webhook_build_info"
        for sample in family.samples
    ]
    assert samples == [({"version": VERSION}, 1.0)]
