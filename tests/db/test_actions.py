"""Hold, release and requeue from the pages (issue 40): who may act, what a form writes (one pending row in
Django's database, nothing of Phorge's), the dry run, what a worker makes of each action, the commands' rows,
the admin's list. What runs real processes and Chromium is in tests/browser/test_actions.py."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from tests.support.helpers import PHORGE_DB, Phorge, failed, holds, requeue, viewer, with_event
from webhook_delivery.records import actions
from webhook_delivery.records.holds import active_holds
from webhook_delivery.records.models import HookHold, OperatorAction, RequeueNotice
from webhook_delivery.requeue_rules import CAP_PER_ACTION
from webhook_delivery.web.access import OPERATE_PERMISSION
from webhook_delivery.worker.actions import OperatorActions
from webhook_delivery.worker.requeue import Requeue
from webhook_delivery.worker.store import Store

pytestmark = PHORGE_DB


def operator(user_model: Any, username: str = "operator") -> Any:
    """A staff account that may see the pages and holds `operate webhooks`."""
    user = viewer(user_model, username=username)
    user.user_permissions.add(Permission.objects.get(codename="operate_webhooks"))
    return user


def signed_in(user: Any, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf, REMOTE_ADDR="192.0.2.7")
    client.force_login(user)
    return client


def form_key(page: str, form: str) -> str:
    found = re.search(rf'id="{form}".*?name="form_key" value="([^"]+)"', page, re.S)
    assert found, f"no {form} on the page"
    return found[1]


def worker(name: str = "test:1:aaaaaa") -> OperatorActions:
    store = Store()
    return OperatorActions(name, store, lambda: Requeue(store, None))


def page(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_an_operator_holds_and_releases_from_the_hook_page(
    phorge: Phorge, django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hook = phorge.hook("http://127.0.0.1:9/x", name="Builds")
    client = signed_in(operator(django_user_model))
    shown = page(client, f"/hooks/{hook}/")
    assert 'id="hold-form"' in shown and 'id="release-form"' not in shown and ">Hold</button>" in shown
    key = form_key(shown, "hold-form")
    for _ in range(2):  # a double submit is one action
        answer = client.post(f"/hooks/{hook}/hold/", {"form_key": key, "reason": "receiver moves to a new host"})
        assert answer.status_code == 303 and answer["Location"] == f"/hooks/{hook}/#actions"
    (action,) = OperatorAction.objects.all()
    assert (action.kind, action.hook_phid, action.reason, action.state) == (
        "hold",
        hook,
        "receiver moves to a new host",
        "pending",
    )
    assert (action.requested_by, action.requested_from) == ("operator", "192.0.2.7")
    assert not HookHold.objects.exists(), "the web process asks; a worker holds"
    pending = page(client, f"/hooks/{hook}/")
    assert f'<meta http-equiv="refresh" content="2; url=/hooks/{hook}/">' in pending, "reloads itself while it waits"
    assert "waiting for a worker" in pending
    assert len(with_event(caplog.records, "action.requested")) == 1

    assert worker().carry_out() is True
    action.refresh_from_db()
    assert action.state == "done" and action.taken_by == "test:1:aaaaaa" and action.outcome.startswith("held (Builds)")
    [hold] = active_holds()
    assert (hold.hook_phid, hold.held_by, hold.reason) == (hook, "operator", "receiver moves to a new host")
    done = page(client, f"/hooks/{hook}/")
    assert 'http-equiv="refresh"' not in done and 'id="release-form"' in done and 'id="hold-form"' not in done
    assert 'data-state="done"' in done and ">Release</button>" in done

    client.post(f"/hooks/{hook}/release/", {"form_key": form_key(done, "release-form")})
    assert worker().carry_out() is True
    assert not HookHold.objects.exists()
    release = OperatorAction.objects.get(kind="release")
    assert release.state == "done" and release.outcome.startswith("released (Builds)")
    assert worker().carry_out() is False, "nothing left to do"
    assert [r.kind for r in with_event(caplog.records, "action.done")] == ["hold", "release"]
    board = page(client, "/")
    assert 'id="actions-table"' in board and board.count('class="gw-action"') == 2


def test_staff_without_the_permission_anonymous_clients_and_forged_posts_change_nothing(
    phorge: Phorge, django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hook = phorge.hook("http://127.0.0.1:9/x")
    request = failed(phorge, hook)
    staff = signed_in(viewer(django_user_model, username="looker"))
    for path in (f"/hooks/{hook}/", f"/requests/{request}/"):
        shown = page(staff, path)
        assert "form_key" not in shown and f"/hooks/{hook}/hold/" not in shown and "requeue/" not in shown
        assert ">Hold</button>" not in shown and ">Requeue</button>" not in shown
    key = actions.new_form_key()
    posts = [
        (f"/hooks/{hook}/hold/", {"form_key": key, "reason": "x"}),
        (f"/hooks/{hook}/release/", {"form_key": key}),
        (f"/hooks/{hook}/requeue/", {"form_key": key, "ids": "1"}),
        (f"/requests/{request}/requeue/", {"form_key": key}),
    ]
    for path, data in posts:
        assert staff.post(path, data).status_code == 403
        anonymous = Client().post(path, data)
        assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    forged = signed_in(operator(django_user_model), csrf=True)  # Django's CSRF check, as in production
    for path, data in posts:
        assert forged.post(path, data).status_code == 403
    assert not OperatorAction.objects.exists() and not HookHold.objects.exists()
    assert phorge.row(request)["status"] == "failed"
    assert len(with_event(caplog.records, "action.forbidden")) == len(posts)


def test_bad_input_is_refused_with_a_reason_and_nothing_is_written(phorge: Phorge, django_user_model: Any) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    request = phorge.request(hook)  # queued, not failed
    client = signed_in(operator(django_user_model))
    key = actions.new_form_key()
    refused = {
        (f"/hooks/{hook}/hold/", "reason", "red \x1b[31m"): (400, "may not contain control characters"),
        (f"/hooks/{hook}/hold/", "reason", "x" * 201): (400, "at most 200 are kept"),
        (f"/hooks/{hook}/hold/", "form_key", "short"): (400, "This form is out of date"),
        (f"/hooks/{hook}/requeue/", "ids", "1,2,x"): (400, "This form is out of date"),
        (f"/hooks/{hook}/requeue/", "ids", ",".join(str(n) for n in range(CAP_PER_ACTION + 1))): (400, "out of date"),
        (f"/hooks/{hook}/requeue/", "since", "-5"): (400, "out of date"),
        (f"/hooks/{hook}/requeue/", "error", "teapot"): (400, "out of date"),
        (f"/requests/{request}/requeue/", "form_key", key): (409, "This request is queued, not failed"),
    }
    for (path, field, value), (status, words) in refused.items():
        data = {"form_key": key, "ids": "1", field: value}
        answer = client.post(path, data)
        assert answer.status_code == status, (path, field)
        assert words in answer.content.decode(), (path, field)
        assert "\x1b" not in answer.content.decode()
    missing = "PHID-HWBH-nosuchhooknosuchhook"
    assert client.post(f"/hooks/{missing}/hold/", {"form_key": key}).status_code == 404
    assert client.post("/requests/PHID-HWBR-nosuchrequestnosuch/requeue/", {"form_key": key}).status_code == 404
    assert client.get(f"/hooks/{hook}/hold/").status_code == 405
    assert not OperatorAction.objects.exists()


def test_the_dry_run_shows_what_would_be_requeued_and_the_worker_requeues_exactly_that(
    phorge: Phorge, django_user_model: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Chat bridge")
    wanted = [failed(phorge, hook, ago=ago) for ago in (300, 200, 100)]
    other_error = failed(phorge, hook, error='"errorType":"timeout","errorCode":28', ago=150)
    too_early = failed(phorge, hook, ago=3 * 3600)
    unreadable = failed(phorge, hook, properties='{"errorType":"http","errorCode":503', ago=120)
    client = signed_in(operator(django_user_model))
    shown = page(client, f"/hooks/{hook}/requeue/?since=1h&until=&error=http/503")
    assert 'data-count="3"' in shown and "3 failed requests would be requeued" in shown
    assert re.findall(r'<tr data-phid="([^"]+)"', shown) == wanted, "oldest failure first"
    assert other_error not in shown and too_early not in shown and unreadable not in shown
    every_error = page(client, f"/hooks/{hook}/requeue/?since=1h")
    assert 'data-count="4"' in every_error and "Left failed: 1 (properties unreadable" in every_error
    assert not OperatorAction.objects.exists(), "a dry run writes nothing"
    ids = re.search(r'name="ids" value="([^"]+)"', shown)
    assert ids is not None
    data = {
        "form_key": form_key(shown, "requeue-confirm"),
        "ids": ids[1],
        "since": re.search(r'name="since" value="([0-9]+)"', shown)[1],  # type: ignore[index]
        "until": "",
        "error": "http/503",
    }
    failed(phorge, hook, ago=50)  # fails after the dry run: not shown, so not requeued
    assert client.post(f"/hooks/{hook}/requeue/", data).status_code == 303
    before = {phid: phorge.row(phid) for phid in [other_error, too_early, unreadable]}
    assert worker().carry_out() is True
    action = OperatorAction.objects.get()
    assert (action.state, action.requeued, action.outcome) == ("done", 3, "requeued the 3 requests shown")
    assert action.what.startswith("requeue 3 requests shown, http/503, failed since ")
    for phid in wanted:
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("queued", "none", 0)
    assert all(phorge.row(phid) == row for phid, row in before.items())
    assert phorge.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'failed'")[0][0] == 4
    (notice,) = RequeueNotice.objects.all()
    assert notice.hook_phid == hook and notice.lowest_id == min(phorge.row(phid)["id"] for phid in wanted)
    again = page(client, f"/hooks/{hook}/requeue/?since=1h&error=http/503")
    assert "1 failed request would be requeued" in again, "only the one that failed after the dry run"


def test_one_requeue_puts_back_at_most_the_cap_and_says_how_many_more(phorge: Phorge, django_user_model: Any) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    for n in range(CAP_PER_ACTION + 20):
        failed(phorge, hook, ago=1000 - n)
    client = signed_in(operator(django_user_model))
    shown = page(client, f"/hooks/{hook}/requeue/")
    assert f'data-count="{CAP_PER_ACTION + 20}" data-shown="{CAP_PER_ACTION}"' in shown
    assert "run the dry run again for the 20 more" in shown
    ids = re.search(r'name="ids" value="([^"]+)"', shown)[1]  # type: ignore[index]
    client.post(f"/hooks/{hook}/requeue/", {"form_key": form_key(shown, "requeue-confirm"), "ids": ids})
    worker().carry_out()
    assert OperatorAction.objects.get().requeued == CAP_PER_ACTION
    assert phorge.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'failed'")[0][0] == 20


def test_requeues_are_limited_per_user_and_a_requeue_waiting_already_is_not_asked_twice(
    phorge: Phorge, django_user_model: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    requests = [failed(phorge, hook) for _ in range(actions.PER_USER + 1)]
    alice = signed_in(operator(django_user_model, "alice"))
    keys = [actions.new_form_key() for _ in requests]
    for request, key in zip(requests[:-1], keys, strict=False):
        assert alice.post(f"/requests/{request}/requeue/", {"form_key": key}).status_code == 303
    assert alice.post(f"/requests/{requests[0]}/requeue/", {"form_key": keys[0]}).status_code == 303, "a resubmit"
    again = alice.post(f"/requests/{requests[0]}/requeue/", {"form_key": actions.new_form_key()})
    assert again.status_code == 409
    assert "A requeue of this request is waiting for a worker already (asked by alice at " in again.content.decode()
    limited = alice.post(f"/requests/{requests[-1]}/requeue/", {"form_key": keys[-1]})
    assert limited.status_code == 429
    said = limited.content.decode()
    assert f"At most {actions.PER_USER} requeues per user within 10 minutes: nothing was done. Ask again after " in said
    assert alice.post(f"/hooks/{hook}/hold/", {"form_key": actions.new_form_key()}).status_code == 303, "its own limit"
    bob = signed_in(operator(django_user_model, "bob"))
    assert bob.post(f"/requests/{requests[-1]}/requeue/", {"form_key": actions.new_form_key()}).status_code == 303
    assert OperatorAction.objects.filter(kind="requeue").count() == actions.PER_USER + 1
    worker().carry_out()
    assert list(OperatorAction.objects.filter(kind="requeue").values_list("requeued", flat=True)) == [1] * 11
    assert alice.post(f"/requests/{requests[0]}/requeue/", {"form_key": actions.new_form_key()}).status_code == 409, (
        "no longer failed: nothing to requeue"
    )


def test_a_request_is_requeued_from_its_page(phorge: Phorge, django_user_model: Any) -> None:
    off = phorge.hook("http://127.0.0.1:9/off", status="disabled", name="Off hook")
    hook = phorge.hook("http://127.0.0.1:9/x")
    request = failed(phorge, hook)
    client = signed_in(operator(django_user_model))
    shown = page(client, f"/requests/{request}/")
    assert "Requeue this request" in shown and ">Requeue</button>" in shown
    client.post(f"/requests/{request}/requeue/", {"form_key": form_key(shown, "requeue-request-form")})
    disabled = failed(phorge, off)
    client.post(f"/requests/{disabled}/requeue/", {"form_key": actions.new_form_key()})
    worker().carry_out()
    assert phorge.row(request)["status"] == "queued"
    one, refused = OperatorAction.objects.order_by("id")
    assert (one.request_phid, one.hook_phid, one.requeued, one.outcome) == (request, hook, 1, "requeued the request")
    assert refused.state == "not-done" and "(Off hook) is disabled: enable it in Phorge first" in refused.outcome
    assert phorge.row(disabled)["status"] == "failed"
    assert "requeued the request" in page(client, f"/requests/{request}/")


def test_only_one_worker_carries_an_action_out_and_old_ones_expire_or_are_taken_again(
    phorge: Phorge, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hook = phorge.hook("http://127.0.0.1:9/x")
    other = phorge.hook("http://127.0.0.1:9/y")
    now = datetime.now(UTC)
    fresh, _ = actions.ask(
        "hold", form_key=actions.new_form_key(), requested_by="alice", requested_from="192.0.2.1", hook_phid=hook
    )
    stale, _ = actions.ask(
        "hold", form_key=actions.new_form_key(), requested_by="alice", requested_from="192.0.2.1", hook_phid=other
    )
    OperatorAction.objects.filter(id=stale.id).update(requested_at=now - actions.EXPIRES_AFTER - timedelta(seconds=1))
    first = actions.take_pending("worker:1:aaaaaa")
    assert [action.id for action in first] == [fresh.id]
    assert actions.take_pending("worker:2:bbbbbb") == [], "taken by the first worker"
    stale.refresh_from_db()
    assert (stale.state, stale.outcome) == ("expired", actions.EXPIRED_OUTCOME)
    (expired,) = with_event(caplog.records, "action.expired")
    assert (expired.action, expired.kind, expired.hook) == (stale.id, "hold", other)
    # The first worker died with it: after RETAKE_AFTER another takes it and carries it out.
    OperatorAction.objects.filter(id=fresh.id).update(taken_at=now - actions.RETAKE_AFTER - timedelta(seconds=1))
    assert worker("worker:2:bbbbbb").carry_out() is True
    fresh.refresh_from_db()
    assert (fresh.state, fresh.taken_by) == ("done", "worker:2:bbbbbb")
    assert [hold.hook_phid for hold in active_holds()] == [hook]


def test_the_commands_write_the_same_rows_done_by_cli(phorge: Phorge, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    hook = phorge.hook("http://127.0.0.1:9/x", name="Builds")
    holds("--hook", hook, "--reason", "maintenance", "--by", "alice", "--no-wait")
    holds("--release", "--hook", hook)
    wanted = failed(phorge, hook)
    requeue("--hook", hook, "--dry-run")
    assert OperatorAction.objects.filter(kind="requeue").count() == 0, "a dry run does nothing"
    requeue("--hook", hook, "--error", "http/503")
    held, released, requeued = OperatorAction.objects.order_by("id")
    for action in (held, released, requeued):
        assert (action.requested_by, action.taken_by, action.state) == ("cli", "cli", "done")
        assert re.fullmatch(r".+@.+", action.requested_from)
    assert (held.kind, held.hook_phid, held.reason) == ("hold", hook, "maintenance")
    assert held.outcome == "held (Builds) by alice"
    assert released.kind == "release" and released.outcome.startswith("released (held by alice since ")
    assert (requeued.kind, requeued.hook_phid, requeued.requeued) == ("requeue", hook, 1)
    assert requeued.outcome == "requeued 1 of 1 selected" and requeued.choices["errors"] == ["http/503"]
    assert phorge.row(wanted)["status"] == "queued"
    events = ("hold.held", "hold.released", "requeue.requeued")
    assert [len(with_event(caplog.records, event)) for event in events] == [1, 1, 1]


def test_the_admin_lists_the_actions_read_only(phorge: Phorge, django_user_model: Any) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    action, _ = actions.ask(
        "hold", form_key=actions.new_form_key(), requested_by="alice", requested_from="192.0.2.1", hook_phid=hook
    )
    looker = signed_in(viewer(django_user_model, username="looker"))
    listing = looker.get("/admin/delivery_status/operatoraction/")
    assert listing.status_code == 200 and hook in listing.content.decode() and "alice" in listing.content.decode()
    detail = looker.get(f"/admin/delivery_status/operatoraction/{action.id}/change/")
    assert detail.status_code == 200 and 'type="submit"' not in detail.content.decode().split('id="content"')[-1]
    assert looker.get("/admin/delivery_status/operatoraction/add/").status_code == 403
    assert looker.post(f"/admin/delivery_status/operatoraction/{action.id}/delete/").status_code == 403


def test_phorge_administrators_may_operate(phorge: Phorge) -> None:
    from webhook_delivery.phorge_auth.accounts import admit, revoke
    from webhook_delivery.phorge_auth.phorge import Verdict, WhoAmI

    user = admit(WhoAmI(Verdict.ADMIN, "admin", "PHID-USER-aaaaaaaaaaaaaaaaaaaa", "alice", "Alice", "a@x"), "tok")
    assert user.has_perm(OPERATE_PERMISSION) and not user.is_superuser
    revoke("PHID-USER-aaaaaaaaaaaaaaaaaaaa", forget_token=True)
    user = type(user).objects.get(pk=user.pk)
    assert not user.has_perm(OPERATE_PERMISSION)


def test_holds_and_releases_are_limited_like_requeues_and_a_release_needs_a_hold(
    phorge: Phorge, django_user_model: Any
) -> None:
    hooks = [phorge.hook(f"http://127.0.0.1:9/{n}") for n in range(actions.PER_USER + 1)]
    alice = signed_in(operator(django_user_model, "alice"))
    refused = alice.post(f"/hooks/{hooks[0]}/release/", {"form_key": actions.new_form_key()})
    assert (
        refused.status_code == 409 and "This hook is not held: there is nothing to release." in refused.content.decode()
    )
    missing = "PHID-HWBH-nosuchhookatall00000000"
    gone = alice.post(f"/hooks/{missing}/release/", {"form_key": actions.new_form_key()})
    assert gone.status_code == 404
    assert "There is no such hook in Phorge, and no hold on it: there is nothing to release." in gone.content.decode()
    assert not OperatorAction.objects.exists(), "a refused release writes nothing, and costs no quota"
    for hook in hooks[:-1]:
        assert alice.post(f"/hooks/{hook}/hold/", {"form_key": actions.new_form_key()}).status_code == 303
    again = alice.post(f"/hooks/{hooks[0]}/hold/", {"form_key": actions.new_form_key()})
    assert again.status_code == 409 and "A hold of this hook is waiting for a worker already" in again.content.decode()
    worker().carry_out()
    limited = alice.post(f"/hooks/{hooks[0]}/release/", {"form_key": actions.new_form_key()})
    assert limited.status_code == 429
    assert "At most 10 holds and releases per user within 10 minutes: nothing was done." in limited.content.decode()
    assert OperatorAction.objects.count() == actions.PER_USER
    HookHold.objects.create(hook_phid=missing, held_by="bob", held_at=datetime.now(UTC))
    bob = signed_in(operator(django_user_model, "bob"))
    assert bob.post(f"/hooks/{missing}/release/", {"form_key": actions.new_form_key()}).status_code == 303, (
        "a hook gone from Phorge that is still held can be released"
    )


def test_the_hook_page_offers_no_second_hold_nor_a_request_page_a_second_requeue_while_one_waits(
    phorge: Phorge, django_user_model: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    request = failed(phorge, hook)
    client = signed_in(operator(django_user_model))
    shown = page(client, f"/hooks/{hook}/")
    client.post(f"/hooks/{hook}/hold/", {"form_key": form_key(shown, "hold-form")})
    shown = page(client, f"/hooks/{hook}/")
    assert 'id="hold-form"' not in shown and 'id="release-form"' not in shown
    assert "A hold of this hook is waiting for a worker" in shown
    shown = page(client, f"/requests/{request}/")
    client.post(f"/requests/{request}/requeue/", {"form_key": form_key(shown, "requeue-request-form")})
    shown = page(client, f"/requests/{request}/")
    assert 'id="requeue-request-form"' not in shown and "A requeue of this request is waiting for a worker" in shown
    worker().carry_out()
    assert 'id="release-form"' in page(client, f"/hooks/{hook}/"), "offered again once carried out"
