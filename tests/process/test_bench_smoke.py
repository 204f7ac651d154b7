"""`bench/run.py --quick --smoke` works end to end: it exits 0 and reports every request delivered exactly once.

Timing figures are not asserted (the benchmark is a report); only that the command runs and checks itself.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_bench_smoke.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

from tests.support import ROOT


@pytest.mark.slow
@pytest.mark.database_server
def test_bench_smoke_run_exits_0_and_prints_the_correctness_line() -> None:
    db = settings.DATABASES["phorge"]
    env = dict(os.environ)
    env.update(
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
