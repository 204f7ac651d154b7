"""gorge_site/client_ip.py: login is throttled per username and client address (django-axes), and the client
address behind a proxy is the one the proxy saw, not what the client wrote into X-Forwarded-For."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def _login(client: Client, password: str, **headers: Any) -> int:
    response = client.post("/admin/login/?next=/", {"username": "ops", "password": password, "next": "/"}, **headers)
    return int(response.status_code)


@pytest.fixture
def ops(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("ops", password="the-right-pw-123", is_staff=True)


def test_five_wrong_passwords_lock_that_username_from_that_address_for_a_while(ops: Any) -> None:
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    assert [_login(attacker, f"guess-{i}") for i in range(5)] == [200] * 4 + [429]
    assert _login(attacker, "the-right-pw-123") == 429  # even the right password, until the cool-off
    colleague = Client(REMOTE_ADDR="198.51.100.20")
    assert _login(colleague, "the-right-pw-123") == 302  # another address is not locked out


def test_behind_a_proxy_the_forged_part_of_x_forwarded_for_does_not_reset_the_count(ops: Any, settings: Any) -> None:
    settings.GORGE_TRUSTED_PROXIES = 1
    proxy = Client(REMOTE_ADDR="10.0.0.2")  # every request arrives from the proxy
    statuses = [_login(proxy, f"guess-{i}", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, 203.0.113.7") for i in range(6)]
    assert statuses == [200] * 4 + [429, 429]
    assert _login(proxy, "the-right-pw-123", HTTP_X_FORWARDED_FOR="198.51.100.20") == 302
