"""gorge_site/security_headers.py: every response carries a Content-Security-Policy; a login whose next= is
refused lands on the dashboard, and staff without the view permission see no page and no JSON."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from gorge_site.security_headers import POLICY

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/", "/admin/login/", "/healthz", "/api/webhook/stats", "/no-such-page"])
def test_every_response_carries_the_policy(client: Client, path: str) -> None:
    policy = client.get(path)["Content-Security-Policy"]
    assert policy == POLICY
    assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";")[0]
    assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy


@pytest.mark.parametrize("next_url", ["https://evil.example/", "//evil.example/x", "javascript:alert(1)"])
def test_a_refused_next_lands_on_the_dashboard(client: Client, django_user_model: Any, next_url: str) -> None:
    django_user_model.objects.create_superuser("root-ish", password="pw-root-ish-1")
    response = client.post(
        f"/admin/login/?next={next_url}", {"username": "root-ish", "password": "pw-root-ish-1", "next": next_url}
    )
    assert response.status_code == 302
    assert response["Location"] == "/"


@pytest.mark.django_db(databases=["default", "phorge"])
def test_staff_without_the_view_permission_see_no_page_and_no_json(
    client: Client, django_user_model: Any, settings: Any
) -> None:
    import dataclasses

    from tests.support.helpers import viewer

    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token="")
    pages = ["/", "/hooks/PHID-HWBH-aaaaaaaaaaaaaaaaaaaa/", "/requests/PHID-HWBR-aaaaaaaaaaaaaaaaaaaa/"]
    client.force_login(django_user_model.objects.create_user("helpdesk", password="pw-helpdesk-1", is_staff=True))
    for path in pages:
        assert client.get(path).status_code == 403, path
    assert client.get("/api/webhook/stats").status_code == 401
    client.force_login(viewer(django_user_model))
    assert client.get("/api/webhook/stats").status_code != 401
    assert client.get("/hooks/PHID-HWBH-aaaaaaaaaaaaaaaaaaaa/").status_code == 404  # allowed in: no such hook
