"""The deployment files an administrator copies: systemd units (verified by systemd itself) and the compose
example. They parse, carry what a hardened network service needs, and hold no secret."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT
from webhook_delivery.phorge.formats import load_config

UNITS = sorted((ROOT / "docs" / "systemd").glob("*.service"))
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "CapabilityBoundingSet": "",
}
SECRET = re.compile(r"(SECRET_KEY|PASSWORD|_PASS|TOKEN)\s*=|mysql://[^@\s]*:[^@\s]+@", re.IGNORECASE)


def service_section(unit: Path) -> dict[str, str]:
    """The [Service] keys, each with its last value (EnvironmentFile, which may repeat, with every one, joined by
    a space)."""
    section, values = "", {}
    for line in unit.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            key, value = key.strip(), value.strip()
            values[key] = f"{values[key]} {value}" if key == "EnvironmentFile" and key in values else value
    return values


def test_there_is_a_web_unit_and_a_worker_template() -> None:
    assert [unit.name for unit in UNITS] == ["gorge-webhook-web.service", "gorge-webhook-worker@.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda unit: unit.name)
def test_units_are_hardened_use_an_environment_file_and_hold_no_secret(unit: Path) -> None:
    service = service_section(unit)
    files = service["EnvironmentFile"].split()
    assert service["User"] == "gorge" and files[0] == "/etc/gorge-webhook/env"
    assert files[1:] == (["-/etc/gorge-webhook/web.env"] if "gunicorn" in service["ExecStart"] else [])
    assert {key: service.get(key) for key in HARDENING} == HARDENING
    assert "gunicorn" in service["ExecStart"] or "deliver_webhooks" in service["ExecStart"]
    body = "\n".join(line for line in unit.read_text().splitlines() if not line.startswith("#"))
    assert not SECRET.search(body), "secrets go in the EnvironmentFile, never in the unit"


def test_systemd_verifies_the_units(tmp_path: Path) -> None:
    """systemd-analyze checks every key and that the commands exist: point them at this checkout."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install Debian's systemd package")
    venv = Path(shutil.which("python", path=str(ROOT / ".venv" / "bin")) or "").parent.parent
    assert (venv / "bin" / "gunicorn").exists(), "run the suite with the project's .venv"
    verified = []
    for unit in UNITS:
        text = unit.read_text().replace("/opt/gorge-webhook/.venv", str(venv)).replace("/opt/gorge-webhook", str(ROOT))
        name = unit.name.replace("@.service", "@1.service")
        (tmp_path / name).write_text(text)
        if name != unit.name:
            (tmp_path / unit.name).write_text(text)
        verified.append(f"./{name}")
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *verified],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_compose_example_parses_runs_read_only_and_takes_secrets_from_the_environment() -> None:
    compose = yaml.safe_load((ROOT / "docs" / "compose.example.yml").read_text())
    services = compose["services"]
    assert set(services) == {"db", "web", "worker"}
    for name in ("web", "worker"):
        service = services[name]
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"]  # noqa: S108 - the compose value
        assert service["depends_on"] == {"db": {"condition": "service_started"}}
        environment = service["environment"]
        assert str(environment["SECRET_KEY"]).startswith("${SECRET_KEY")
        for key, value in environment.items():
            literal = re.sub(r"\$\{[^}]*\}", "", str(value))
            assert not re.search(r"//[^@/\s]*:[^@/\s]+@", literal), f"{name}: {key} carries a password"
    grace = re.fullmatch(r"(\d+)s", services["worker"]["stop_grace_period"])
    delivery_timeout = load_config({}).delivery.delivery_timeout
    assert grace and int(grace[1]) > delivery_timeout, "SIGTERM lets the deliveries in flight finish and write"


def test_the_web_unit_runs_as_many_gunicorn_workers_as_the_image() -> None:
    ours = service_section(ROOT / "docs" / "systemd" / "gorge-webhook-web.service")["ExecStart"].split()
    image = re.search(r"WEB_CONCURRENCY=(\d+)", (ROOT / "Dockerfile").read_text())
    assert image is not None and "--workers" in ours
    assert ours[ours.index("--workers") + 1] == image[1]
