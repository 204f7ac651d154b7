"""The documented production environment passes Django's deployment checks, and static files collect."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_dockerfile import ROOT, production_env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_passes_with_the_documented_production_environment(tmp_path: Path) -> None:
    env = production_env(tmp_path)
    assert "DEBUG" not in env and "GORGE_BEHIND_TLS_PROXY" not in env
    result = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_startup_refuses_a_missing_secret_key(tmp_path: Path) -> None:
    env = production_env(tmp_path)
    del env["SECRET_KEY"]
    result = manage(env, "check")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr and "gorge.E001" in result.stderr


def test_collectstatic_builds_the_compressed_manifest(tmp_path: Path) -> None:
    static_root = tmp_path / "static"
    (tmp_path / "collect_settings.py").write_text(
        f"from gorge_site.settings import *  # noqa: F403\nSTATIC_ROOT = {str(static_root)!r}\n"
    )
    env = production_env(tmp_path, DJANGO_SETTINGS_MODULE="collect_settings", PYTHONPATH=str(tmp_path))
    result = manage(env, "collectstatic", "--noinput")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((static_root / "staticfiles.json").read_text())
    hashed = manifest["paths"]["admin/css/base.css"]
    assert hashed != "admin/css/base.css", "file names carry a content hash (cache busting)"
    assert (static_root / hashed).is_file()
    assert (static_root / f"{hashed}.gz").is_file(), "whitenoise pre-compresses what it serves"
