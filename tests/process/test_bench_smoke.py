"""`bench/run.py --quick --smoke` works end to end: it exits 0 and reports every request delivered exactly once.

Timing figures are not asserted (the benchmark is a report); only that the command runs and checks itself.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_bench_smoke.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support import ROOT


@pytest.mark.slow
@pytest.mark.database_server
def test_bench_smoke_run_exits_0_and_prints_the_correctness_line(tmp_path: Path) -> None:
    # The run measures the workers of the tree BENCH_TREE names (as bench/compare.py does with another
    # commit's sources): a copy of this one whose manage.py notes each command it runs.
    tree = tmp_path / "tree"
    skip = shutil.ignore_patterns(".venv", ".git", ".*_cache", ".hypothesis", "var", "__pycache__", "*.sqlite3")
    shutil.copytree(ROOT, tree, ignore=skip)
    ran = tmp_path / "ran.txt"
    manage = tree / "manage.py"
    manage.write_text(
        manage.read_text().replace(
            "def main() -> None:\n",
            f"def main() -> None:\n    with open({str(ran)!r}, 'a') as ran:\n        ran.write(sys.argv[1] + '\\n')\n",
        )
    )
    db = settings.DATABASES["phorge"]
    env = dict(os.environ)
    env.update(
        BENCH_TREE=str(tree),
        BENCH_MYSQL_HOST=str(db["HOST"] or "127.0.0.1"),
        BENCH_MYSQL_PORT=str(db["PORT"] or 3306),
        BENCH_MYSQL_USER=str(db["USER"]),
        BENCH_MYSQL_PASSWORD=str(db["PASSWORD"] or ""),
    )
    done = subprocess.run(
        [
            sys.executable,
            "bench/run.py",
            "--quick",
            "--smoke",
            "--database",
            f"gwsmoke{os.getpid()}_herald",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    correctness = [line for line in done.stdout.splitlines() if line.startswith("correctness:")]
    assert len(correctness) == 1, output[-4000:]
    assert "0 duplicates, 0 lost" in correctness[0]
    assert correctness[0].endswith("every request exactly once")
    assert "one process, 16 hooks" in done.stdout  # the figures table was printed
    assert f"code: the sources in {tree} (BENCH_TREE)" in done.stdout
    commands = ran.read_text().split()
    assert "migrate" in commands and commands.count("deliver_webhooks") >= 10, commands
