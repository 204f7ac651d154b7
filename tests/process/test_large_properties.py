"""Large `properties` cost bounded memory: they are read one row at a time, at most two in hand per process,
and a value longer than the server could ever have taken from Phorge settles as unreadable unread.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/db/test_large_properties.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.helpers import PHORGE_DB, Phorge, big_properties, worker_env
from tests.support.processes import ROOT

pytestmark = PHORGE_DB


ROWS = 16


MEASURE = textwrap.dedent(
    """
    import resource, subprocess, sys
    done = subprocess.run(sys.argv[1:])
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
    sys.exit(done.returncode)
    """
)


@pytest.mark.slow
def test_sixteen_rows_of_six_megabytes_keep_a_once_worker_small(phorge: Phorge) -> None:
    phids = []
    for i in range(ROWS):
        hook = phorge.hook("http://127.0.0.1:9/refused", name=f"big {i}")  # nothing listens: http/7 at once
        phids.append(phorge.request(hook, properties=big_properties(i)))
    before = {phid: phorge.row(phid)["properties"] for phid in phids}
    assert all(len(text) > 6_500_000 for text in before.values())
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, sys.executable, "manage.py", "deliver_webhooks", "--once", "-v", "0"],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak_mb = int(done.stdout.strip().splitlines()[-1])
    for phid in phids:
        row = phorge.row(phid)
        assert row["status"] == "failed"
        # PHP's json_decode makes keys 0..n a list, and its json_encode writes it back as one.
        assert row["properties"].endswith('"secure":false,"errorType":"http","errorCode":7}'), row["properties"][-200:]
    # Before: 586 MB (all sixteen in hand at once, and every thread kept its malloc arena). Now ~230 MB.
    assert peak_mb < 300, f"peak RSS {peak_mb} MB"
