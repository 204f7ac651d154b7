"""gorge_site/routers.py: no migration is pending, and none targets Phorge's database."""

from __future__ import annotations

import subprocess

import pytest
from django.db import connections

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, worker_env
from tests.support.processes import manage


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return manage(*args, env=worker_env(**env), ok=False)


@PHORGE_DB
@pytest.mark.slow
def test_no_migration_is_pending_and_none_targets_phorge() -> None:
    result = _manage("makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (ROOT / "webhook_delivery" / "migrations").exists()
    refused = _manage("migrate", "--database", "phorge")
    assert refused.returncode != 0
    assert "Phorge owns the herald database" in refused.stderr
    with connections["phorge"].cursor() as cursor:
        cursor.execute("SHOW TABLES")
        assert sorted(t for (t,) in cursor.fetchall()) == ["herald_webhook", "herald_webhookrequest"]
