"""The admin's lists at scale (reads/request_lists.py, admin.py, records/admin.py): the searches find the
requests the admin found before (every request with that PHID, hook or object), an object's within the bound
the page states; the lists read a page at a time through an index and count no further than 1,000."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.ui_helpers import full_scans
from webhook_delivery.reads import request_lists
from webhook_delivery.records.models import DeliveryAttempt

pytestmark = [PHORGE_DB]
LIST = "/admin/webhook_delivery/heraldwebhookrequest/"
ATTEMPTS = "/admin/delivery_status/deliveryattempt/"


def listed(admin_client: Any, query: dict[str, str], url: str = LIST) -> tuple[list[str], str]:
    html = admin_client.get(url, query).content.decode()
    found = re.findall(r"PHID-HWBR-[a-z0-9]+", html.split('id="result_list"', 1)[-1])
    return list(dict.fromkeys(found)), html


def before(phorge: Phorge, where: str, params: tuple[Any, ...] = ()) -> list[str]:
    """What the admin listed before: every matching request, newest first, read whole."""
    rows = phorge.execute(f"SELECT phid FROM herald_webhookrequest WHERE {where} ORDER BY id DESC", params)
    return [phid.decode() if isinstance(phid, bytes) else phid for (phid,) in rows]


def test_searches_by_phid_hook_and_object_find_what_the_admin_found_before(admin_client: Any, phorge: Phorge) -> None:
    now = phorge.now()
    alpha = phorge.hook("http://127.0.0.1:9/a", name="Alpha bridge")
    beta = phorge.hook("http://127.0.0.1:9/b", name="beta")
    task, other = "PHID-TASK-aaaaaaaaaaaaaaaaaaaa", "PHID-TASK-bbbbbbbbbbbbbbbbbbbb"
    for hook, obj, status in [
        (alpha, task, "sent"),
        (alpha, other, "failed"),
        (beta, task, "queued"),
        (beta, other, "sent"),
    ]:
        result = {"sent": "okay", "failed": "fail", "queued": "none"}[status]
        phorge.request(hook, object_phid=obj, status=status, lastRequestResult=result, lastRequestEpoch=now)
    old = phorge.request(alpha, object_phid=task, created=now - 3 * 86400, status="sent", lastRequestResult="okay")
    one = before(phorge, "objectPHID = %s AND webhookPHID = %s", (other, alpha))[0]

    assert listed(admin_client, {"q": one})[0] == before(phorge, "phid = %s", (one,)) == [one]
    assert listed(admin_client, {"q": alpha})[0] == before(phorge, "webhookPHID = %s", (alpha,))
    assert listed(admin_client, {"q": "alpha"})[0] == before(phorge, "webhookPHID = %s", (alpha,))  # by name
    assert listed(admin_client, {"q": beta, "status__exact": "queued"})[0] == before(
        phorge, "webhookPHID = %s AND status = 'queued'", (beta,)
    )
    found, html = listed(admin_client, {"q": task})
    # An object's requests within the bound: the last day's (the request of 3 days ago is not searched)
    assert found == before(phorge, "objectPHID = %s AND dateCreated >= %s", (task, now - 86400))
    assert old not in found and old in before(phorge, "objectPHID = %s", (task,))
    assert 'id="search-bound"' in html and "last 24 hours only" in html
    assert 'id="search-bound"' not in listed(admin_client, {"q": alpha})[1]


def test_the_bound_of_an_object_search_is_also_a_number_of_requests(
    admin_client: Any, phorge: Phorge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(request_lists, "SEARCH_ROWS", 3)
    hook = phorge.hook("http://127.0.0.1:9/a")
    task = "PHID-TASK-cccccccccccccccccccc"
    phorge.request(hook, object_phid=task)
    for _ in range(3):
        phorge.request(hook)
    newest = phorge.request(hook, object_phid=task)
    found, html = listed(admin_client, {"q": task})
    assert found == [newest]  # the first one is 5 requests back: beyond the newest 3
    assert "at most the newest 3" in html


@pytest.fixture
def many(phorge: Phorge) -> dict[str, Any]:
    """1,200 failed requests among 2,400, and their attempts: past the lists' count bound."""
    hooks = [phorge.hook(f"http://127.0.0.1:9/m{i}") for i in range(3)]
    now = phorge.now()
    phids = ", ".join(f"'{hook}'" for hook in hooks)
    phorge.execute(
        f"""INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, lastRequestResult,
            lastRequestEpoch, dateCreated, dateModified)
        SELECT CONCAT('PHID-HWBR-m', LPAD(seq, 19, '0')), ELT(1 + MOD(seq, 3), {phids}),
            CONCAT('PHID-TASK-m', LPAD(seq, 19, '0')), IF(MOD(seq, 2) = 0, 'failed', 'sent'), '{{}}',
            IF(MOD(seq, 2) = 0, 'fail', 'okay'), {now}, {now}, {now}
        FROM seq_1_to_2400 ORDER BY seq"""
    )
    return {"hooks": hooks}


def test_a_list_past_the_bound_says_more_than_and_reads_through_an_index(
    admin_client: Any, phorge: Phorge, many: dict[str, Any]
) -> None:
    with CaptureQueriesContext(connections["phorge"]) as captured:
        first, html = listed(admin_client, {"status__exact": "failed"})
    assert first == before(phorge, "status = 'failed'")[:50]
    assert '<span id="result-count">more than 1000</span>' in html
    second, _html = listed(admin_client, {"status__exact": "failed", "p": "2"})
    assert second == before(phorge, "status = 'failed'")[50:100]
    for query in captured.captured_queries:
        assert "COUNT(*) FROM `herald_webhookrequest`" not in query["sql"]
        if query["sql"].startswith("SELECT"):
            assert not full_scans(query["sql"]), query["sql"]
    few, html = listed(admin_client, {"q": many["hooks"][0], "last_request_result__exact": "fail"})
    assert len(few) == 50 and '<span id="result-count">400</span>' in html


def test_the_attempt_list_counts_no_further_than_its_bound_and_offers_fixed_filters(
    admin_client: Any, phorge: Phorge
) -> None:
    from datetime import UTC, datetime, timedelta

    start = datetime.now(UTC) - timedelta(hours=1)
    DeliveryAttempt.objects.bulk_create(
        DeliveryAttempt(
            request_phid=f"PHID-HWBR-{i:020d}",
            hook_phid="PHID-HWBH-aaaaaaaaaaaaaaaaaaaa",
            object_phid=f"PHID-TASK-{i:020d}",
            started_at=start + timedelta(seconds=i),
            duration_ms=10,
            status="sent",
            result="okay" if i % 3 else "fail",
            error_type="http",
            error_code="200" if i % 3 else "500",
            worker_id="w",
        )
        for i in range(1100)
    )
    with CaptureQueriesContext(connections["default"]) as captured:
        html = admin_client.get(ATTEMPTS).content.decode()
    assert '<span id="result-count">more than 1000</span>' in html
    assert "PHID-HWBR-00000000000000001099" in html  # newest first
    sql = " ".join(query["sql"] for query in captured.captured_queries)
    assert "DISTINCT" not in sql  # the filters' values are fixed, not read from the table
    html = admin_client.get(ATTEMPTS, {"result__exact": "fail"}).content.decode()
    assert '<span id="result-count">367</span>' in html
    html = admin_client.get(ATTEMPTS, {"q": "PHID-TASK-00000000000000000042"}).content.decode()
    assert '<span id="result-count">1</span>' in html
