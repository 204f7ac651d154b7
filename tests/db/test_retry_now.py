"""Retry now from a hook's page (web/retry_now.py): the dry run says which requests wait on their retry backoff,
how many, when the next is tried and whether the breaker is open; the action leaves an order for the workers
(records/retries.py) and writes nothing of Phorge's; staff who may only look are told why there is no button."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from tests.support.helpers import PHORGE_DB, Phorge, viewer
from webhook_delivery.phorge.herald import utc
from webhook_delivery.records import actions
from webhook_delivery.records.models import OperatorAction, RetryOrder
from webhook_delivery.records.retries import in_force
from webhook_delivery.web.access import OPERATE_PERMISSION
from webhook_delivery.worker.actions import OperatorActions
from webhook_delivery.worker.requeue import Requeue
from webhook_delivery.worker.store import Store

pytestmark = PHORGE_DB


def waiting(phorge: Phorge, hook: str, failed_at: int) -> str:
    """A Herald request (retry=forever) whose last attempt failed at `failed_at`: queued, in its backoff."""
    return phorge.request(
        hook, retry="forever", lastRequestResult="fail", lastRequestEpoch=failed_at, dateModified=failed_at,
        created=failed_at - 600,
    )  # fmt: skip


def operator(django_user_model: Any) -> Client:
    from django.contrib.auth.models import Permission

    user = viewer(django_user_model)
    user.user_permissions.add(Permission.objects.get(codename=OPERATE_PERMISSION.split(".")[1]))
    client = Client(REMOTE_ADDR="192.0.2.7")
    client.force_login(user)
    return client


def carry_out() -> None:
    store = Store()
    assert OperatorActions("test:1:aaaaaa", store, lambda: Requeue(store, None)).carry_out()


def test_the_dry_run_lists_what_waits_and_retry_now_leaves_an_order_but_changes_no_row(
    phorge: Phorge, django_user_model: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Recovered hook")
    now = phorge.now()
    rows = [waiting(phorge, hook, now - 200 + 10 * n) for n in range(3)]
    due_already = waiting(phorge, hook, now - 400)  # its backoff is over: it waits on nothing
    before = {phid: phorge.row(phid) for phid in [*rows, due_already]}
    client = operator(django_user_model)
    hook_page = client.get(f"/hooks/{hook}/").content.decode()
    assert "3 queued requests failed within the last 5 min; the next is tried at" in hook_page
    shown = client.get(f"/hooks/{hook}/retry/").content.decode()
    assert "3 requests wait on their retry backoff" in shown
    assert re.findall(r'<tr data-phid="([^"]+)"', shown) == rows, "oldest failure first, the due one left out"
    assert f"Without Retry now the next of these is tried at {utc(now - 200 + 300)}" in shown
    assert "The hook's breaker is closed (3 failed attempts within its window)" in shown
    assert not OperatorAction.objects.exists(), "a dry run writes nothing"
    key = re.search(r'name="form_key" value="([^"]+)"', shown)[1]  # type: ignore[index]
    up_to = int(re.search(r'name="failed_up_to" value="([0-9]+)"', shown)[1])  # type: ignore[index]
    later = waiting(phorge, hook, up_to + 1)  # failed after the dry run: not covered
    answer = client.post(f"/hooks/{hook}/retry/", {"form_key": key, "failed_up_to": str(up_to)})
    assert answer.status_code == 303 and answer["Location"] == f"/hooks/{hook}/#actions"
    again = client.post(f"/hooks/{hook}/retry/", {"form_key": actions.new_form_key(), "failed_up_to": str(up_to)})
    assert again.status_code == 409 and "A retry now of this hook is waiting for a worker already" in (
        again.content.decode()
    )
    carry_out()
    action = OperatorAction.objects.get()
    assert (action.kind, action.state, action.requeued) == ("retry", "done", 3)
    assert action.outcome == (
        f"3 requests (Recovered hook) that failed up to {utc(up_to)} due at once: workers send them one at a time, "
        "oldest first"
    )
    assert in_force() == {hook: up_to}
    assert RetryOrder.objects.get().lapses_at == up_to + 300
    assert all(phorge.row(phid) == row for phid, row in before.items()), "no row of Phorge's written"
    assert phorge.row(later)["status"] == "queued"
    page = client.get(f"/hooks/{hook}/").content.decode()
    assert "due at once: workers send them one at a time" in page and "retry now" in page


def test_while_the_breaker_is_open_the_page_and_the_outcome_say_they_wait_for_it(
    phorge: Phorge, django_user_model: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Broken hook")
    now = phorge.now()
    failures = [now - 100 + n for n in range(10)]
    for at in failures:
        waiting(phorge, hook, at)
    closes = failures[0] + 300 + 1  # the tenth newest failure leaves the window
    client = operator(django_user_model)
    shown = client.get(f"/hooks/{hook}/retry/").content.decode()
    assert f"The hook's breaker is open until {utc(closes)}</strong>: 10 failed attempts within the last 5 min" in (
        shown
    )
    assert "Retry now does not close it: they go once it closes by itself" in shown
    assert f"the breaker is open until {utc(closes)}: nothing of this hook is called before" in (
        client.get(f"/hooks/{hook}/").content.decode()
    )
    up_to = re.search(r'name="failed_up_to" value="([0-9]+)"', shown)[1]  # type: ignore[index]
    client.post(f"/hooks/{hook}/retry/", {"form_key": actions.new_form_key(), "failed_up_to": up_to})
    carry_out()
    outcome = OperatorAction.objects.get().outcome
    assert (
        f"; the hook's breaker is open until {utc(closes)} (10 failed attempts within 300 s): they go then" in outcome
    )


def test_who_may_only_look_sees_the_dry_run_and_why_there_is_no_button(phorge: Phorge, django_user_model: Any) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    waiting(phorge, hook, phorge.now() - 30)
    client = Client()
    client.force_login(viewer(django_user_model, username="looker"))
    shown = client.get(f"/hooks/{hook}/retry/").content.decode()
    assert "1 request waits on its retry backoff" in shown and 'id="retry-confirm"' not in shown
    assert "There is no button here for you: to retry them now an account needs the permission" in shown
    refused = client.post(f"/hooks/{hook}/retry/", {"form_key": actions.new_form_key(), "failed_up_to": "1"})
    assert refused.status_code == 403 and not OperatorAction.objects.exists()
