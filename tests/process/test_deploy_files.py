"""`manage.py migrate` as the systemd units run it: the whole file system read-only (ProtectSystem=strict), the
code's directory included, but for the unit's StateDirectory, which systemd hands the process as
STATE_DIRECTORY. Emulated with read-only bind mounts in a private mount namespace (`unshare -m`):
the embedded SQLite default goes to the state directory and migrate passes; under the project's var/, as it
used to, SQLite cannot open its file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.helpers import production_env

UNIT = ROOT / "docs" / "systemd" / "gorge-webhook-web.service"


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1].strip() for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def migrate_read_only(tmp_path: Path, state: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """migrate in a private mount namespace where `/`, the checkout and its virtualenv are read-only and only
    `state` (and /tmp, private in the unit too) may be written."""
    env = production_env(tmp_path, **extra)
    del env["DATABASE_URL"]  # the default: what the units use unless told otherwise
    env["HOME"] = str(state)  # Environment=HOME=/var/lib/gorge-webhook
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    venv = Path(sys.executable).resolve().parent.parent
    read_only = [p for p in dict.fromkeys(["/", str(ROOT), str(venv), str(ROOT.resolve())]) if Path(p).exists()]
    script = [f'mount --bind "{state}" "{state}"']
    for path in read_only:
        script.append(f'mount --bind "{path}" "{path}" 2>/dev/null; mount -o remount,bind,ro "{path}"')
    script.append(f'cd "{ROOT}" && exec "{sys.executable}" manage.py migrate --noinput -v 0')
    return subprocess.run(
        # As root a mount namespace of its own; otherwise in a user namespace too, where this user may mount.
        ["unshare", "-m", *([] if os.geteuid() == 0 else ["-r"]), "sh", "-c", " && ".join(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_migrate_passes_under_the_units_read_only_paths(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.fail("util-linux's unshare is missing: it makes the private mount namespace")
    assert unit_values("ProtectSystem") == ["strict"] and unit_values("StateDirectory") == ["gorge-webhook"]
    assert unit_values("WorkingDirectory") == ["/opt/gorge-webhook"]  # the checkout, read-only here
    state = tmp_path / "state"  # /var/lib/gorge-webhook
    state.mkdir()
    done = migrate_read_only(tmp_path, state, STATE_DIRECTORY=str(state))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (state / "gorge_site.sqlite3").is_file()

    elsewhere = tmp_path / "other-state"
    elsewhere.mkdir()
    before = migrate_read_only(tmp_path, elsewhere)  # no STATE_DIRECTORY: the project's var/, read-only here
    assert before.returncode != 0 and "unable to open database file" in before.stderr, before.stderr[-2000:]
