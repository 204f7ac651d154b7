"""What the pages say of an action's state (web/action_list.py): waiting while workers run, waiting with none
running and until when, expired on time (and logged once), carried out."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from tests.support.helpers import PHORGE_DB, Phorge, viewer, with_event
from webhook_delivery.records import actions
from webhook_delivery.records.models import OperatorAction, WorkerHeartbeat

pytestmark = PHORGE_DB

ASKED = datetime(2026, 12, 3, 9, 30, 5, tzinfo=UTC)


def hold(hook: str, at: datetime) -> OperatorAction:
    action, _ = actions.ask(
        "hold",
        form_key=actions.new_form_key(),
        requested_by="alice",
        requested_from="192.0.2.7",
        hook_phid=hook,
        now=at,
    )
    return action


def row_text(page: str, action: OperatorAction) -> str:
    start = page.index(f'data-action="{action.id}"')
    return page[start : page.index("</tr>", start)]


def test_a_pending_action_says_whether_a_worker_runs_and_until_when_it_waits(
    phorge: Phorge, django_user_model: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Waiting hook")
    client = Client()
    client.force_login(viewer(django_user_model))
    now = datetime.now(UTC).replace(microsecond=0)
    action = hold(hook, now - timedelta(minutes=3))
    shown = row_text(client.get(f"/hooks/{hook}/").content.decode(), action)
    until = now - timedelta(minutes=3) + actions.EXPIRES_AFTER
    assert f"no worker is running: this action waits until {until:%H:%M:%S} UTC, then expires" in shown
    assert 'data-state="pending"' in shown
    WorkerHeartbeat.objects.create(worker_id="w:1:a", hostname="w", pid=1, started_at=now, last_seen=now, state={})
    shown = row_text(client.get(f"/hooks/{hook}/").content.decode(), action)
    assert "waiting for a worker: the running ones look for actions every second" in shown


def test_an_action_past_its_time_is_shown_expired_on_time_and_logged_once(
    phorge: Phorge, django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hook = phorge.hook("http://127.0.0.1:9/x")
    client = Client()
    client.force_login(viewer(django_user_model))
    action = hold(hook, ASKED)
    first = row_text(client.get(f"/hooks/{hook}/").content.decode(), action)
    assert 'data-state="expired"' in first
    assert "no worker took it within 10 minutes: nothing was done" in first
    assert "2026-12-03 09:30:05 UTC" in first, "times with seconds and zone"
    client.get("/")
    (logged,) = with_event(caplog.records, "action.expired")
    assert (logged.action, logged.kind, logged.hook, logged.requested_by) == (action.id, "hold", hook, "alice")
    assert actions.take_pending("w:1:a") == [], "a worker finds it expired too, and does not log it again"
    assert len(with_event(caplog.records, "action.expired")) == 1


def test_the_admin_shows_times_with_seconds_and_zone(phorge: Phorge, django_user_model: Any) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    hold(hook, ASKED)
    client = Client()
    client.force_login(viewer(django_user_model))
    listing = client.get("/admin/delivery_status/operatoraction/").content.decode()
    assert "2026-12-03 09:30:05 UTC" in listing
