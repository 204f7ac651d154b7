"""No hook URI and no HMAC key in any page, JSON body, admin view, metric, SQL we send, or log line."""

from __future__ import annotations

import dataclasses
import io
import ipaddress
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from tests.support.helpers import PHID_ALPHABET, PHORGE_DB, Phorge, with_event
from tests.support.receiver import Receiver
from tests.support.ui_helpers import properties
from tests.support.urlwalk import every_page
from webhook_delivery.logformat import JsonFormatter
from webhook_delivery.worker.loop import build_worker

pytestmark = [PHORGE_DB]
TOKEN = "leak-test-t0ken"


def marker_key() -> str:
    return "leakkey" + "".join(secrets.choice(PHID_ALPHABET) for _ in range(25))


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[io.StringIO]:
    """Everything logged at DEBUG, through caplog and through the JSON formatter (extra fields included)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    # urllib3 keeps the WARNING level settings.LOGGING pins it to whatever LOG_LEVEL says: at DEBUG it
    # would print every request line, URI path included.
    assert logging.getLogger("urllib3").level == logging.WARNING
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def test_no_uri_or_key_anywhere(
    admin_client: Any, phorge: Phorge, all_logs: io.StringIO, caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    uri_marker = "uri-marker-" + secrets.token_hex(8)
    keys = [marker_key() for _ in range(3)]
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token=TOKEN)
    with Receiver(hold_seconds=3) as receiver:
        hooks = {
            "ok": phorge.hook(receiver.url(f"/{uri_marker}/ok"), key=keys[0], name="leak ok"),
            "fails": phorge.hook(receiver.url(f"/{uri_marker}/s500"), key=keys[1], name="leak fails"),
            "blocked": phorge.hook(f"http://127.0.0.2:{receiver.port}/{uri_marker}/ok", key=keys[2], name="blocked"),
            "disabled": phorge.hook(receiver.url(f"/{uri_marker}/ok"), key=keys[0], status="disabled", name="off"),
            "unsigned": phorge.hook(receiver.url(f"/{uri_marker}/ok"), key="", name="unsigned"),
        }
        requests = {name: phorge.request(phid, properties=properties()) for name, phid in hooks.items()}
        requests["retried"] = phorge.request(hooks["fails"], properties=properties(retry="forever"))

        with CaptureQueriesContext(connections["phorge"]) as sent_sql:
            config = dataclasses.replace(
                settings.GORGE_WEBHOOK,
                outbound_blacklist=(ipaddress.ip_network("127.0.0.2/32"),),
                delivery_timeout=2.0,
                claim_lease_sec=8,
            )
            assert build_worker(config, once=True).run() == 0
            bodies = fetch_everything(admin_client, hooks, requests)

        assert [r.path for r in receiver.requests].count(f"/{uri_marker}/ok") == 1  # the delivery really ran
    outcome = {name: phorge.row(phid) for name, phid in requests.items()}
    assert outcome["ok"]["status"] == "sent"
    assert outcome["fails"]["status"] == "failed" and outcome["retried"]["status"] == "queued"
    assert '"errorCode":"uri"' in outcome["blocked"]["properties"]
    assert '"errorCode":"disabled"' in outcome["disabled"]["properties"]
    assert outcome["unsigned"]["dateModified"] == outcome["unsigned"]["dateCreated"]
    assert with_event(caplog.records, "delivery.sent") and with_event(caplog.records, "delivery.refused")  # captured

    logged = all_logs.getvalue() + caplog.text
    logged += "".join(f"{r.getMessage()} {r.args!r} {vars(r)!r}" for r in caplog.records)
    sql = "".join(query["sql"] for query in sent_sql.captured_queries)
    assert len(bodies) > 25
    for secret in [uri_marker, *keys]:
        for where, text in bodies.items():
            assert secret not in text, f"{secret} leaked in {where}"
        assert secret not in logged, f"{secret} leaked in the log"
        assert secret not in sql, f"{secret} leaked into SQL text"


def fetch_everything(client: Any, hooks: dict[str, str], requests: dict[str, str]) -> dict[str, str]:
    """Every page of the URLconf (admin object pages for every row), and the list filters and searches."""
    pages = every_page()
    pages += [
        "/admin/webhook_delivery/heraldwebhook/?status__exact=enabled",
        f"/admin/webhook_delivery/heraldwebhook/?q={hooks['ok']}",
        "/admin/webhook_delivery/heraldwebhookrequest/?status__exact=failed&last_request_result__exact=fail",
        f"/admin/webhook_delivery/heraldwebhookrequest/?q={hooks['fails']}",
        f"/admin/webhook_delivery/heraldwebhookrequest/?q={requests['ok']}",
        "/admin/webhook_delivery/heraldwebhookrequest/?q=leak",
    ]
    bodies = {}
    for page in pages:
        response = client.get(page, headers={"X-Service-Token": TOKEN})
        assert response.status_code in (200, 302, 403, 404, 405), (page, response.status_code)
        bodies[page] = response.content.decode() + repr(sorted(response.items()))
    assert '"queuedCount"' in bodies["/api/webhook/stats"] and "leak ok" in bodies["/"]
    assert any("/heraldwebhookrequest/" in page and "/change/" in page for page in bodies)
    # The hook and request pages were walked, with attempts on record to show.
    assert any(page.startswith("/hooks/") and "HTTP 500" in body for page, body in bodies.items())
    assert any(page.startswith("/requests/") and "Invalid URI" in body for page, body in bodies.items())
    return bodies
