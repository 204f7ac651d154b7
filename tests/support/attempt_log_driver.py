"""Drives the real AttemptLog against whatever Django database DATABASE_URL names, in its own process
(tests/process/test_attempts.py runs it against throwaway MariaDB and PostgreSQL databases).

Writes one batch of good records mixed with bad ones (NUL, emoji, a lone surrogate, a number the column
cannot hold), then, once that batch was written, a second batch of good records; prints one JSON line:
whether the writer thread was alive after the first batch, and how many records were counted lost.
"""

from __future__ import annotations

import json
import os
import sys
import time

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gorge_site.settings")
    django.setup()
    from django.conf import settings
    from prometheus_client import REGISTRY

    from webhook_delivery.worker.attempts import FLUSH_SEC, AttemptLog, AttemptRecord

    prefix = sys.argv[1]

    def record(name: str, **fields: object) -> AttemptRecord:
        values: dict[str, object] = {
            "request_phid": f"PHID-HWBR-{prefix}{name}",
            "hook_phid": "PHID-HWBH-driver",
            "object_phid": "PHID-TASK-driver",
            "started_at": time.time(),
            "duration_ms": 1.5,
            "status": "sent",
            "result": "okay",
            "error_type": "http",
            "error_code": "200",
            "http_status": 200,
            "response_bytes": 2,
            "response_prefix": "ok",
        }
        values.update(fields)
        return AttemptRecord(**values)  # type: ignore[arg-type]

    log = AttemptLog(settings.GORGE_WEBHOOK, "driver-worker")
    first = [record(f"good{i}") for i in range(3)]
    first += [
        record("nul", response_prefix="a\x00b", object_phid="PHID-TASK-\x00x"),
        record("emoji", response_prefix="ok \U0001f600 done", hook_phid="PHID-HWBH-\U0001f600"),
        record("surrogate", response_prefix="half \ud800 pair"),
        record("accents", response_prefix="café ñ"),
        record("toobig", http_status=70_000),  # no column of PositiveSmallIntegerField holds it
    ]
    first += [record(f"good{i}") for i in range(3, 6)]
    for item in first:  # all queued before the writer's first look: one batch
        log.record(item)
    time.sleep(FLUSH_SEC * 3)
    alive = log._thread.is_alive()
    for i in range(3):
        log.record(record(f"later{i}"))
    time.sleep(FLUSH_SEC * 3)
    log.close()
    lost = REGISTRY.get_sample_value("gorge_webhook_attempt_log_lost_total") or 0.0
    print(json.dumps({"alive_after_first_batch": alive, "lost": lost}))


if __name__ == "__main__":
    main()
