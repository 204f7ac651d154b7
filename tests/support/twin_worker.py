"""The worker's parts in memory for the unit lane (webhook_delivery/worker/twins.py, whose store keeps
store.Store's contract: tests/support/store_contract.py, run on both stores), as test_job.py, test_loop.py
and test_scheduling.py build them: a worker over a MemoryStore, its deliveries real HTTP calls."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from webhook_delivery.config import DeliveryConfig
from webhook_delivery.worker.loop import Worker
from webhook_delivery.worker.parts import Pipelining
from webhook_delivery.worker.twins import MemoryStore, memory_parts

NOW = 1_764_620_000
HOOK = "PHID-HWBH-twintwintwintwintwi"
OTHER = "PHID-HWBH-othrothrothrothrothr"
FOREVER = json.dumps({"retry": "forever", "transactionPHIDs": [], "triggerPHIDs": [HOOK]})


def config(**changes: Any) -> DeliveryConfig:
    base = DeliveryConfig(
        silent=False, outbound_blacklist=(), outbound_blacklist_from_env=True, delivery_timeout=3.0, attempt_log=False
    )
    return dataclasses.replace(base, **changes)


def worker(store: MemoryStore, *, pipelining: Pipelining | None = None, **changes: Any) -> Worker:
    settings = config(**changes)
    parts = memory_parts(settings, store)
    if pipelining is not None:
        parts.pipelining = pipelining
    return Worker(settings, parts, once=True, poll_interval_ms=10)
