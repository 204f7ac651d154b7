"""Cost of the worker's queue window when nothing is due, in-process (run by bench/run.py).

Runs under the worker's environment (GORGE_WEBHOOK_DATABASE_URL etc.) and prints one JSON object:
start-up, a full safety sweep (the cursors start again and every hook's queue is read back), idle poll()
percentiles, and for contrast the naive candidate query a window-less worker would run on every poll.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

# The measured tree's code (bench/common.py's TREE), not necessarily the bench's own.
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(Path(__file__).resolve().parent.parent))

import django


def main() -> None:
    polls = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    django.setup()
    from django.conf import settings
    from django.db import connections

    from webhook_delivery.phorge.herald import REQUESTS
    from webhook_delivery.worker.store import Store
    from webhook_delivery.worker.window import QueueWindow

    config = settings.GORGE_WEBHOOK
    window = QueueWindow(Store(), lease=config.claim_lease_sec, retry_backoff=config.retry_backoff_sec)

    def settle() -> None:
        while window.poll():
            pass

    started = time.perf_counter()
    window.start()
    settle()
    start_ms = (time.perf_counter() - started) * 1000

    sweeps = []
    for _ in range(3):
        started = time.perf_counter()
        window._sweep()
        settle()
        sweeps.append((time.perf_counter() - started) * 1000)

    for _ in range(20):
        window.poll()
    timings = []
    for _ in range(polls):
        started = time.perf_counter()
        window.poll()
        due = window.candidates()
        timings.append((time.perf_counter() - started) * 1000)
        if due:
            raise SystemExit(f"expected nothing due, got {len(due)} hooks")

    naive = []
    with connections["phorge"].cursor() as cursor:
        for _ in range(3):
            started = time.perf_counter()
            cursor.execute(f"SELECT id FROM {REQUESTS} WHERE status = 'queued' ORDER BY id LIMIT 100")
            cursor.fetchall()
            naive.append((time.perf_counter() - started) * 1000)

    timings.sort()
    print(
        json.dumps(
            {
                "start_ms": start_ms,
                "sweep_ms": statistics.median(sweeps),
                "poll_median_ms": statistics.median(timings),
                "poll_p99_ms": timings[min(len(timings) - 1, int(len(timings) * 0.99))],
                "naive_query_ms": statistics.median(naive),
                "tracked": window.held_count,
            }
        )
    )


if __name__ == "__main__":
    main()
