"""Large `properties` cost bounded memory: they are read one row at a time, at most two in hand per process,
and a value longer than the server could ever have taken from Phorge settles as unreadable unread.

Here: what runs on Django's test databases; the rest is in tests/process/test_large_properties.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.support.helpers import PHORGE_DB, Phorge, big_properties
from tests.support.receiver import Receiver
from webhook_delivery.worker.loop import build_worker
from webhook_delivery.worker.store import INLINE_PROPERTIES, Store

pytestmark = PHORGE_DB


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
