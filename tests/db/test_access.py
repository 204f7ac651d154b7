"""Refusals for lack of a permission (web/access.py) are worded pages with no traceback in the log, and a page
that shows no button says why."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client

from tests.support.helpers import PHORGE_DB, Phorge, failed, viewer, with_event
from webhook_delivery.logformat import RefusalsWithoutTraceback, TextFormatter
from webhook_delivery.records import actions

pytestmark = PHORGE_DB


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [record for record in caplog.records if record.exc_info], "a refusal logged with a traceback"
    assert "Traceback" not in caplog.text


def test_an_action_without_the_permission_gets_a_worded_page_and_one_log_line(
    phorge: Phorge, django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = phorge.hook("http://127.0.0.1:9/x")
    client = Client()
    client.force_login(viewer(django_user_model, username="looker"))
    answer = client.post(f"/hooks/{hook}/hold/", {"form_key": actions.new_form_key()})
    text = answer.content.decode()
    assert answer.status_code == 403
    assert "You are signed in as <strong>looker</strong>, whose account does not hold the permission" in text
    assert "<strong>operate webhooks</strong> needed to hold, release, requeue or retry from these pages." in text
    assert "Nothing was done." in text and "403 Forbidden" not in text
    (line,) = with_event(caplog.records, "action.forbidden")
    assert (line.user, line.permission) == ("looker", "operate webhooks")
    no_traceback(caplog)


def test_a_page_without_the_view_permission_gets_a_worded_page(
    phorge: Phorge, django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    staff = django_user_model.objects.create_user("staff-only", password="pw-staff-only-1", is_staff=True)
    client = Client()
    client.force_login(staff)
    answer = client.get("/")
    assert answer.status_code == 403
    assert "the permission <strong>view heraldwebhookrequest</strong> needed to see the webhook delivery pages" in (
        answer.content.decode()
    )
    assert with_event(caplog.records, "access.forbidden")
    no_traceback(caplog)


def test_the_dry_run_says_why_there_is_no_button(phorge: Phorge, django_user_model: Any) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    failed(phorge, hook)
    client = Client()
    client.force_login(viewer(django_user_model, username="looker"))
    shown = client.get(f"/hooks/{hook}/requeue/").content.decode()
    assert "1 failed request would be requeued" in shown and 'id="requeue-confirm"' not in shown
    assert "There is no button here for you: to requeue them an account needs the permission" in shown
    assert "<strong>looker</strong> does not hold it. This dry run changes nothing." in shown


def test_the_admins_own_refusal_is_the_worded_page_and_its_log_line_has_no_traceback(
    django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client = Client(raise_request_exception=False)
    client.force_login(viewer(django_user_model, username="looker"))
    answer = client.get("/admin/delivery_status/operatoraction/add/")
    assert (
        answer.status_code == 403 and "does not hold a permission needed to see or do this" in answer.content.decode()
    )
    (record,) = [r for r in caplog.records if r.getMessage().startswith("Forbidden (Permission denied)")]
    line = TextFormatter().format(record)  # as the console handler wrote it: its filter ran on this record
    assert "Forbidden (Permission denied): /admin/delivery_status/operatoraction/add/" in line
    assert "Traceback" not in line and "PermissionDenied" not in line


def test_the_console_drops_the_traceback_of_a_refusal_only() -> None:
    console = next(
        h for h in logging.getLogger().handlers if any(isinstance(f, RefusalsWithoutTraceback) for f in h.filters)
    )
    try:
        raise PermissionError("x")
    except PermissionError:
        import sys

        caught = sys.exc_info()
    for status, kept in ((403, False), (500, True)):
        record = logging.LogRecord("django.request", logging.WARNING, "x", 1, "Forbidden", None, caught)
        record.status_code = status
        assert console.filter(record)
        assert bool(record.exc_info) is kept
