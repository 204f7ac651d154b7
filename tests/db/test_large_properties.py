"""Large `properties` cost bounded memory: they are read one row at a time, at most two in hand per process,
and a value longer than the server could ever have taken from Phorge settles as unreadable unread."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.helpers import PHORGE_DB, Phorge, worker_env
from tests.processes import ROOT
from tests.receiver import Receiver
from webhook_delivery.worker.loop import build_worker
from webhook_delivery.worker.store import INLINE_PROPERTIES, Store

pytestmark = PHORGE_DB

ROWS = 16
XACTIONS = 165_000  # about 6.6 MB of properties per row, as in the review


def big_properties(seed: int) -> str:
    xactions = {str(i): f"PHID-XACT-TASK-{seed:05d}{i:010d}" for i in range(XACTIONS)}
    return json.dumps(
        {"retry": "never", "transactionPHIDs": xactions, "triggerPHIDs": [], "silent": False, "secure": False},
        separators=(",", ":"),
    )


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


def test_a_value_longer_than_the_server_could_take_settles_as_unreadable_without_being_read(
    phorge: Phorge, delivery_config: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(Store, "max_statement_bytes", lambda self: 1_000_000)  # as if max_allowed_packet were 1 MB
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/big/ok"))
        big = phorge.request(hook, properties=big_properties(1))
        small = phorge.request(hook, retry="forever")
        before = phorge.row(big)
        build_worker(dataclasses.replace(delivery_config, attempt_log=False), once=True).run()
        build_worker(dataclasses.replace(delivery_config, attempt_log=False), once=True).run()
        assert [r.object_phid for r in receiver.requests] == [phorge.row(small)["objectPHID"]]
    after = phorge.row(big)
    assert (after["status"], after["lastRequestResult"], after["lastRequestEpoch"]) == ("failed", "none", 0)
    assert after["properties"] == before["properties"]  # left byte for byte
    assert len(before["properties"]) > INLINE_PROPERTIES
