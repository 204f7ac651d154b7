"""The suite's own safety, in a process: a production database URL in the environment is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, mysql_admin

pytestmark = PHORGE_DB


@pytest.mark.slow
def test_a_production_database_url_in_the_environment_is_never_touched(tmp_path: Path) -> None:
    sentinel = f"gwsentinel{os.getpid()}_herald"
    admin = mysql_admin()
    cursor = admin.cursor()
    cursor.execute(f"CREATE DATABASE `{sentinel}`")
    cursor.execute(f"CREATE TABLE `{sentinel}`.`herald_webhook` (id INT PRIMARY KEY)")
    cursor.execute(f"INSERT INTO `{sentinel}`.`herald_webhook` VALUES (7)")
    db = settings.DATABASES["phorge"]
    server = f"mysql://{db['USER']}@{db['HOST']}:{db['PORT']}"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        GORGE_TEST_DATABASE_URL=server,
        GORGE_WEBHOOK_DATABASE_URL=f"{server}/{sentinel}",  # as exported in a production shell or container
        GORGE_WEBHOOK_NAMESPACE=sentinel.removesuffix("_herald"),
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/db/test_admin.py", "-x"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        cursor.execute(f"SELECT id FROM `{sentinel}`.`herald_webhook`")
        assert cursor.fetchall() == ((7,),)
    finally:
        cursor.execute(f"DROP DATABASE IF EXISTS `{sentinel}`")
        admin.close()
