"""The gorge-webhook JSON contract: bodies, authentication before routing, and generic errors."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.support.helpers import PHORGE_DB, Phorge, phorge_unreachable, viewer, with_event
from tests.support.ui_helpers import seed_contract

pytestmark = PHORGE_DB

TOKEN = "s3rvice-t0ken"
UNAUTHORIZED = {"error": {"code": "ERR_UNAUTHORIZED", "message": "missing or invalid service token"}}
NOT_FOUND = {"error": {"code": "ERR_NOT_FOUND", "message": "Not Found"}}
INTERNAL = {"error": {"code": "ERR_INTERNAL", "message": "internal server error"}}
STATS = {"data": {"queuedCount": 3, "sentCount": 2, "failedCount": 1, "activeWebhooks": 1}}
HOOKS = {"data": {"total": 2}}


@pytest.fixture
def token(settings: Any) -> str:
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token=TOKEN)
    return TOKEN


@pytest.fixture
def contract(phorge: Phorge) -> Phorge:
    seed_contract(phorge)
    return phorge


def body(response: Any) -> Any:
    """The answer, the fields added to Gorge's stats checked and left out: Gorge's own must be exactly Gorge's."""
    assert response["Content-Type"] == "application/json"
    found = json.loads(response.content)
    data = found.get("data")
    if isinstance(data, dict) and "queuedCount" in data:
        assert isinstance(data.pop("countedAt"), int)
        assert data.pop("countsComplete") is True
    return found


@pytest.mark.parametrize(("path", "expected"), [("/api/webhook/stats", STATS), ("/api/webhook/hooks", HOOKS)])
def test_header_token(client: Any, contract: Phorge, token: str, path: str, expected: Any) -> None:
    response = client.get(path, headers={"X-Service-Token": token})
    assert response.status_code == 200
    assert body(response) == expected


@pytest.mark.parametrize(("path", "expected"), [("/api/webhook/stats", STATS), ("/api/webhook/hooks", HOOKS)])
def test_query_token(client: Any, contract: Phorge, token: str, path: str, expected: Any) -> None:
    response = client.get(path, {"token": token})
    assert (response.status_code, body(response)) == (200, expected)


def test_an_empty_header_falls_back_to_the_query_token(client: Any, contract: Phorge, token: str) -> None:
    response = client.get("/api/webhook/stats", {"token": token}, headers={"X-Service-Token": ""})
    assert (response.status_code, body(response)) == (200, STATS)


def test_the_header_wins_over_the_query(client: Any, contract: Phorge, token: str) -> None:
    response = client.get("/api/webhook/stats", {"token": token}, headers={"X-Service-Token": "wrong"})
    assert (response.status_code, body(response)) == (401, UNAUTHORIZED)


@pytest.mark.parametrize("path", ["/api/webhook/stats", "/api/webhook/hooks", "/api/webhook/health"])
@pytest.mark.parametrize("given", [{"headers": {"X-Service-Token": "wrong"}}, {"data": {"token": "wrong"}}, {}])
def test_wrong_or_missing_token(client: Any, contract: Phorge, token: str, path: str, given: Any) -> None:
    response = client.get(path, **given)
    assert (response.status_code, body(response)) == (401, UNAUTHORIZED)


def test_a_non_ascii_token_is_refused_not_a_crash(client: Any, contract: Phorge, token: str) -> None:
    response = client.get("/api/webhook/stats", {"token": "tökén"})
    assert (response.status_code, body(response)) == (401, UNAUTHORIZED)


@pytest.mark.parametrize("path", ["/api/webhook/nope", "/api/webhook", "/api/webhook/", "/api/webhook/stats/x"])
def test_authentication_comes_before_routing(client: Any, contract: Phorge, token: str, path: str) -> None:
    assert (client.get(path).status_code, body(client.get(path))) == (401, UNAUTHORIZED)
    response = client.get(path, headers={"X-Service-Token": token})
    assert (response.status_code, body(response)) == (404, NOT_FOUND)


@pytest.mark.parametrize("path", ["/api/webhook/stats/", "/api/webhook/hooks/", "/api/webhook/Stats"])
def test_strict_routing(client: Any, contract: Phorge, token: str, path: str) -> None:
    response = client.get(path, headers={"X-Service-Token": token})
    assert (response.status_code, body(response)) == (404, NOT_FOUND)


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "options"])
def test_wrong_method_is_not_found(client: Any, contract: Phorge, token: str, method: str) -> None:
    response = getattr(client, method)("/api/webhook/stats", headers={"X-Service-Token": token})
    assert (response.status_code, body(response)) == (404, NOT_FOUND)
    anonymous = getattr(client, method)("/api/webhook/stats")
    assert (anonymous.status_code, body(anonymous)) == (401, UNAUTHORIZED)


def test_without_a_configured_token_only_staff_sessions_get_in(
    client: Any, contract: Phorge, settings: Any, django_user_model: Any
) -> None:
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token="")
    assert client.get("/api/webhook/stats", headers={"X-Service-Token": ""}).status_code == 401
    assert client.get("/api/webhook/stats", {"token": ""}).status_code == 401
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-viewer-1"))
    assert body(client.get("/api/webhook/stats")) == UNAUTHORIZED
    client.force_login(django_user_model.objects.create_user("staffer", password="pw-staffer-1", is_staff=True))
    assert body(client.get("/api/webhook/stats")) == UNAUTHORIZED  # staff alone is not enough
    client.force_login(viewer(django_user_model, "operator"))
    response = client.get("/api/webhook/stats")
    assert (response.status_code, body(response)) == (200, STATS)


def test_a_configured_token_is_required_even_for_staff(
    client: Any, contract: Phorge, token: str, django_user_model: Any
) -> None:
    client.force_login(django_user_model.objects.create_user("staffer", password="pw-staffer-1", is_staff=True))
    assert body(client.get("/api/webhook/stats")) == UNAUTHORIZED


def test_counts_are_live(client: Any, contract: Phorge, token: str) -> None:
    contract.request(contract.hook("http://127.0.0.1:9/late", name="late"))
    response = client.get("/api/webhook/stats", headers={"X-Service-Token": token})
    assert body(response)["data"] == {"queuedCount": 4, "sentCount": 2, "failedCount": 1, "activeWebhooks": 2}
    assert body(client.get("/api/webhook/hooks", {"token": token})) == {"data": {"total": 3}}


def test_an_empty_phorge_answers_zeros(client: Any, phorge: Phorge, token: str) -> None:
    response = client.get("/api/webhook/stats", headers={"X-Service-Token": token})
    assert body(response) == {"data": {"queuedCount": 0, "sentCount": 0, "failedCount": 0, "activeWebhooks": 0}}


@pytest.mark.parametrize("path", ["/api/webhook/stats", "/api/webhook/hooks", "/api/webhook/health"])
def test_database_down_is_a_generic_500(
    client: Any, contract: Phorge, token: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    with phorge_unreachable():
        response = client.get(path, headers={"X-Service-Token": token})
    assert (response.status_code, body(response)) == (500, INTERNAL)
    text = response.content.decode()
    for leak in ("3306", "herald", "SELECT", "connection refused", "Can't connect", "MySQL", "127.0.0.1", "2003"):
        assert leak.lower() not in text.lower()
    assert with_event(caplog.records, "api.failed")
    # and the service recovers by itself once the database is back
    assert client.get(path, headers={"X-Service-Token": token}).status_code == 200
