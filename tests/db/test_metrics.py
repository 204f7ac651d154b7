"""web/metrics.py: a scrape reads Phorge's database at most once per few seconds, however often it comes."""

from __future__ import annotations

from django.test import Client

from tests.support.helpers import PHORGE_DB, Phorge

pytestmark = PHORGE_DB


def test_metrics_read_phorge_at_most_once_per_few_seconds(phorge: Phorge, client: Client) -> None:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from webhook_delivery.web.metrics import COLLECTOR

    phorge.request(phorge.hook("http://example.com/"))
    COLLECTOR.forget()
    with CaptureQueriesContext(connections["phorge"]) as first:
        assert client.get("/metrics").status_code == 200
    with CaptureQueriesContext(connections["phorge"]) as later:
        for _ in range(20):
            assert client.get("/metrics").status_code == 200
    assert len(first.captured_queries) > 0
    assert len(later.captured_queries) == 0
