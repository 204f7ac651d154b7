"""`make demo` works in a fresh copy of the checkout, twice, and says what really happened.

The demo runs the real `deliver_webhooks --once` against SQLite; these tests read its summary, check it
against the demo database itself, and check the pieces it is made of (the DDL translation, the blacklist).

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_demo.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.docs import readme_setup_commands
from tests.support.processes import manage
from webhook_delivery.version import VERSION

NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "var", "staticfiles", "__pycache__", "*.pyc", "*.sqlite3", ".env", ".*_cache", "bench-results"
)


EXPECTED = {
    "requests": 7,
    "delivered": 4,
    "failed": 3,
    "queued": 0,
    "retried": 1,
    "failures": {"hook/disabled": 1, "hook/uri": 1, "http/500": 1},
    "receiver_calls": 6,
    "signatures_valid": 6,
    "signatures_invalid": 0,
    "page_status": 200,
}


def fresh_checkout(tmp_path: Path) -> Path:
    """The project as a new clone would have it, sharing this run's virtualenv (no reinstall)."""
    if sys.prefix == sys.base_prefix:
        pytest.fail("run the tests from the project's virtualenv (make test), the demo reuses it")
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT, copy, ignore=NOT_COPIED, symlinks=True)
    (copy / ".venv").symlink_to(Path(sys.prefix))
    return copy


def run_demo(checkout: Path) -> subprocess.CompletedProcess[str]:
    demo_command, _ = readme_setup_commands()
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "TMPDIR") if key in os.environ}
    env["DEMO_SERVE"] = "0"
    return subprocess.run(
        demo_command.split(), cwd=checkout, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def demo_result(output: str) -> dict[str, object]:
    lines = [line for line in output.splitlines() if line.startswith("demo result: ")]
    assert len(lines) == 1, output
    result: dict[str, object] = json.loads(lines[0].removeprefix("demo result: "))
    return result


@pytest.mark.slow
def test_make_demo_in_a_fresh_checkout(tmp_path: Path) -> None:
    checkout = fresh_checkout(tmp_path)
    for run in (1, 2):  # the second run starts again from nothing
        completed = run_demo(checkout)
        output = completed.stdout + completed.stderr
        assert completed.returncode == 0, output
        assert demo_result(output) == EXPECTED, f"run {run}:\n{output}"

    assert "python manage.py deliver_webhooks --once" in output
    assert "pass 2 (after the retry backoff)" in output
    login = [line for line in output.splitlines() if "staff user 'demo' created with password " in line]
    assert len(login) == 1 and len(login[0].rsplit(" ", 1)[1]) >= 12
    answered = [line for line in output.splitlines() if line.startswith("The dashboard answered: ")]
    assert len(answered) == 1 and " HTTP 200 " in answered[0]

    herald = sqlite3.connect(checkout / "var/demo/phabricator_herald.sqlite3")
    rows = herald.execute("SELECT status, lastRequestResult, properties FROM herald_webhookrequest").fetchall()
    assert Counter((status, result) for status, result, _ in rows) == {
        ("sent", "okay"): 4,
        ("failed", "fail"): 1,
        ("failed", "none"): 2,
    }
    for _status, _result, properties in rows:
        assert json.loads(properties)["errorType"] in {"http", "hook"}
    for uri, key in herald.execute("SELECT webhookURI, hmacKey FROM herald_webhook"):
        assert uri not in output and key not in output, "a hook URI or HMAC key reached the terminal"
    site = sqlite3.connect(checkout / "var/demo/site.sqlite3")
    assert site.execute("SELECT username, is_staff FROM auth_user").fetchall() == [("demo", 1)]


@pytest.mark.slow
def test_the_demo_runs_from_the_images_files_alone(tmp_path: Path) -> None:
    """Only what the Dockerfile copies into the image (its COPY lines), and `manage.py demo` works there."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    runtime = dockerfile[dockerfile.index("AS runtime") :]
    copied = re.findall(r"^COPY (\S+) \S+$", runtime, re.MULTILINE)
    assert copied == ["manage.py", "pyproject.toml", "gorge_site/", "webhook_delivery/"]
    app = tmp_path / "app"
    app.mkdir()
    for item in copied:
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, app / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, app / item)
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update(
        DJANGO_SETTINGS_MODULE="gorge_site.settings",
        GORGE_ENV_FILE="/dev/null",
        DEBUG="true",
        SECRET_KEY="demo-from-the-image-layout-0123456789",
        DATABASE_URL=f"sqlite:///{app}/var/demo/site.sqlite3",
        GORGE_WEBHOOK_DATABASE_URL=f"sqlite:///{app}/var/demo/phabricator_herald.sqlite3",
    )
    done = manage("demo", "--no-serve", env=env, ok=False, cwd=app, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert demo_result(output) == EXPECTED
    assert manage("deliver_webhooks", "--version", env=env, cwd=app).stdout == f"{VERSION}\n"
