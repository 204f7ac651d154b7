"""web/views.py: rows nobody expected never turn a page into a 500, and pages never decode more than they show."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from django.test import Client

from tests.support.helpers import PHORGE_DB, Phorge, viewer
from tests.support.ui_helpers import logged_attempt
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.outcomes import http_status, is_success

pytestmark = PHORGE_DB


@pytest.fixture
def operator(client: Client, django_user_model: Any) -> Client:
    from django.contrib.auth.models import Permission

    user = viewer(django_user_model)
    user.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))  # the admin's lists too
    client.force_login(user)
    return client


def failed_properties(code: object) -> str:
    return json.dumps(
        {"retry": "never", "transactionPHIDs": [], "triggerPHIDs": [], "errorType": "http", "errorCode": code},
        separators=(",", ":"),
    )


def test_status_codes_are_read_only_from_three_ascii_digits() -> None:
    assert [http_status(code) for code in ["200", 503, "²00", "2" * 5000, "٣٠٠", "099", "20", ""]] == [
        200,
        503,
        None,
        None,
        None,
        None,
        None,
        None,
    ]
    assert is_success("http", "204") and not is_success("http", "²04") and not is_success("timeout", "200")


@pytest.mark.parametrize("code", ["²", "2" * 5000, "٣٠٣", "\u0662\u0660\u0660"])
def test_an_error_code_nobody_expected_leaves_every_page_standing(operator: Client, phorge: Phorge, code: str) -> None:
    hook = phorge.hook("http://127.0.0.1:9/odd", name="odd codes")
    now = phorge.now()
    phid = phorge.request(
        hook, properties=failed_properties(code), status="failed", lastRequestResult="fail", lastRequestEpoch=now
    )
    for path in ["/", f"/hooks/{hook}/", f"/requests/{phid}/", "/admin/webhook_delivery/heraldwebhookrequest/"]:
        response = operator.get(path)
        assert response.status_code == 200, path
        assert "Traceback" not in response.content.decode()


def test_a_phid_outside_the_url_pattern_gets_no_link_and_no_500(operator: Client, phorge: Phorge) -> None:
    odd_hook = "PHID-HWBH-odd.phid"
    odd_request = "PHID-HWBR-odd/request"
    now = phorge.now()
    phorge.insert_hook_row(
        seeding.hook_row("http://127.0.0.1:9/odd", now=now, name="odd hook", phid=odd_hook, hmac_key="k" * 32)
    )
    phorge.request(odd_hook, properties=failed_properties(500), status="failed", lastRequestResult="fail")
    normal_hook = phorge.hook("http://127.0.0.1:9/normal", name="normal hook")
    logged_attempt(odd_request, normal_hook, ended=now, result="fail", code=500).save()
    hook_id = phorge.execute("SELECT id FROM herald_webhook WHERE phid = %s", (odd_hook,))[0][0]
    for path in [
        "/",
        f"/hooks/{normal_hook}/",
        f"/admin/webhook_delivery/heraldwebhook/{hook_id}/change/",
        "/admin/webhook_delivery/heraldwebhookrequest/",
        "/admin/delivery_status/deliveryattempt/",
    ]:
        response = operator.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        assert "odd" in page, path
        assert 'href="/hooks/PHID-HWBH-odd.phid/"' not in page and "/requests/PHID-HWBR-odd/request/" not in page


def test_the_request_list_and_a_large_request_page_never_decode_what_they_do_not_show(
    operator: Client, phorge: Phorge
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/large", name="large rows")
    xactions = {f"PHID-XACT-TASK-{i:015d}": f"PHID-XACT-TASK-{i:015d}" for i in range(60_000)}  # ~2.6 MB each
    text = json.dumps(
        {"retry": "never", "transactionPHIDs": xactions, "errorType": "http", "errorCode": 503}, separators=(",", ":")
    )
    phids = [phorge.request(hook, properties=text, status="failed", lastRequestResult="fail") for _ in range(8)]
    tracemalloc.start()
    try:
        listing = operator.get("/admin/webhook_delivery/heraldwebhookrequest/")
        _, list_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        page = operator.get(f"/requests/{phids[0]}/")
        _, page_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert listing.status_code == 200 and page.status_code == 200
    assert listing.content.decode().count("HTTP 503 (http/503)") == 8
    assert "HTTP 503" in page.content.decode()
    # Eight rows of 2.6 MB decoded would cost well over 100 MB; read out by the database, a few MB.
    assert list_peak < 20_000_000, list_peak
    assert page_peak < 20_000_000, page_peak
