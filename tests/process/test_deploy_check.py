"""The documented production environment passes Django's deployment checks, and static files collect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.helpers import production_env
from tests.support.processes import manage


@pytest.mark.parametrize("redirect", ["", "false"], ids=["redirect", "no redirect (handover.md)"])
def test_check_deploy_passes_with_the_documented_production_environment(tmp_path: Path, redirect: str) -> None:
    env = production_env(tmp_path)
    assert "DEBUG" not in env and "GORGE_BEHIND_TLS_PROXY" not in env
    if redirect:
        env["GORGE_SSL_REDIRECT"] = redirect  # install.md says only gorge.I001 shows: so it is, this way too
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env, ok=False)
    assert result.returncode == 0, result.stdout + result.stderr
    said = result.stdout + result.stderr
    # PHP delivery, and the CA bundle and proxy deliveries go with: INFOs
    assert re.findall(r"\(([a-z_.]+\.[A-Z]\d+)\)", said) == ["gorge.I001", "gorge.I002"], said
    assert "System check identified 2 issues (" in said


def test_startup_refuses_a_missing_secret_key(tmp_path: Path) -> None:
    env = production_env(tmp_path)
    del env["SECRET_KEY"]
    result = manage("check", env=env, ok=False)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr and "gorge.E001" in result.stderr


def test_collectstatic_builds_the_compressed_manifest(tmp_path: Path) -> None:
    static_root = tmp_path / "static"
    (tmp_path / "collect_settings.py").write_text(
        f"from gorge_site.settings import *  # noqa: F403\nSTATIC_ROOT = {str(static_root)!r}\n"
    )
    env = production_env(tmp_path, DJANGO_SETTINGS_MODULE="collect_settings", PYTHONPATH=str(tmp_path))
    result = manage("collectstatic", "--noinput", env=env, ok=False)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((static_root / "staticfiles.json").read_text())
    hashed = manifest["paths"]["admin/css/base.css"]
    assert hashed != "admin/css/base.css", "file names carry a content hash (cache busting)"
    assert (static_root / hashed).is_file()
    assert (static_root / f"{hashed}.gz").is_file(), "whitenoise pre-compresses what it serves"
