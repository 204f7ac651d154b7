"""Hold, release and requeue from the pages (issue 40), in Chromium, against a real web process (gunicorn, the
production settings) whose MariaDB user has only SELECT on Phorge's tables, and a real worker that carries
the actions out: the web process writes none of Phorge's rows, and every action still completes."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.helpers import PHORGE_DB, Phorge, failed, mysql_admin, raw_rows, with_event
from tests.support.processes import SiteDatabase, count_status, seed
from tests.support.receiver import Receiver, calls
from tests.support.waiting import wait_for
from tests.support.web_process import select_only_user, staff_account, web_process

pytestmark = [PHORGE_DB, pytest.mark.browser, pytest.mark.slow]

OPERATOR = ("web-operator", "pw-web-operator-1")
LOOKER = ("web-looker", "pw-web-looker-1")
DONE_WITHIN_MS = 30_000  # the page reloads itself every 2 s while an action waits; a worker looks every second


@pytest.fixture(scope="module")
def web(site_database: SiteDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The web process, as the SELECT-only user, and its two staff accounts: one may operate, one may look."""
    staff_account(site_database, *OPERATOR, "view_heraldwebhookrequest", "operate_webhooks")
    staff_account(site_database, *LOOKER, "view_heraldwebhookrequest")
    with select_only_user() as phorge_url:
        user = phorge_url.split("//", 1)[1].split(":", 1)[0]
        cursor = mysql_admin().cursor()
        cursor.execute("SHOW GRANTS FOR %s@'%%'", (user,))
        granted = [grant for (grant,) in cursor.fetchall() if "ON *.*" not in grant]
        assert len(granted) == 2 and all(grant.startswith("GRANT SELECT ON ") for grant in granted), granted
        with web_process(site_database, tmp_path_factory.mktemp("web"), phorge_url) as base:
            yield base


def sign_in(chromium: Any, base: str, account: tuple[str, str]) -> Any:
    page = chromium.new_context().new_page()
    page.goto(f"{base}/")
    page.fill("#id_username", account[0])
    page.fill("#id_password", account[1])
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/")
    return page


def action_row(page: Any, kind: str, state: str) -> Any:
    return page.locator(f'#actions-table tr[data-kind="{kind}"][data-state="{state}"]')


def held_in_heartbeat(site: SiteDatabase) -> set[str]:
    states = [json.loads(state) for (state,) in site.sql("SELECT state FROM delivery_status_workerheartbeat")]
    return set.intersection(*(set(state.get("hooks_held", ["<none>"])) for state in states)) if states else set()


def audit(site: SiteDatabase) -> list[tuple[Any, ...]]:
    return site.sql(
        "SELECT kind, hook_phid, request_phid, requested_by, requested_from, state, requeued, outcome "
        "FROM delivery_status_operatoraction ORDER BY id"
    )


def test_hold_from_the_hook_page_then_release_each_request_delivered_once(
    phorge: Phorge, site: SiteDatabase, web: str, workers: Any, chromium: Any
) -> None:
    with Receiver() as receiver:
        held = phorge.hook(receiver.url("/held/ok"), name="Held hook")
        other = phorge.hook(receiver.url("/other/ok"), name="Other hook")
        page = sign_in(chromium, web, OPERATOR)
        page.goto(f"{web}/hooks/{held}/")
        page.fill("#hold-reason", "receiver moves to a new host")
        page.get_by_role("button", name="Hold", exact=True).click()
        page.wait_for_url(f"{web}/hooks/{held}/#actions")
        assert action_row(page, "hold", "pending").count() == 1, "no worker yet: it waits"
        assert "no worker is running: this action waits until " in page.inner_text("#actions-table")
        worker = workers("operated", "--poll-interval-ms", "100", **site.env).start()
        expect(action_row(page, "hold", "done")).to_have_count(1, timeout=DONE_WITHIN_MS)  # the page reloads itself
        assert "held (Held hook): no worker starts a call for it" in page.inner_text("#actions-table")
        assert "receiver moves to a new host" in page.inner_text("#holds")
        wait_for(lambda: held_in_heartbeat(site) == {held}, 20, "the hold in the worker's heartbeat")

        held_objects = seed(phorge, [held], 40)
        before = raw_rows(phorge, held)
        other_objects = seed(phorge, [other], 40)
        wait_for(lambda: calls(receiver, "/other/") == Counter(other_objects), 30, "the other hook's deliveries")
        time.sleep(1.0)  # ten more polls
        assert raw_rows(phorge, held) == before and not calls(receiver, "/held/"), "no call started, nothing claimed"

        page.get_by_role("button", name="Release", exact=True).click()
        page.wait_for_url(f"{web}/hooks/{held}/#actions")
        expect(action_row(page, "release", "done")).to_have_count(1, timeout=DONE_WITHIN_MS)
        wait_for(lambda: calls(receiver, "/held/") == Counter(held_objects), 30, "the released deliveries")
        wait_for(lambda: count_status(phorge, "sent") == 80, 10, "the results written")
        time.sleep(0.5)
        assert calls(receiver, "/held/") == Counter(held_objects), "each exactly once"
    rows = audit(site)
    assert [(kind, hook, by, state) for kind, hook, _r, by, _f, state, _n, _o in rows] == [
        ("hold", held, OPERATOR[0], "done"),
        ("release", held, OPERATOR[0], "done"),
    ]
    assert all(row[4] == "127.0.0.1" for row in rows), "from the client's address"
    lines = worker.lines()
    assert [line["kind"] for line in with_event(lines, "action.done")] == ["hold", "release"]
    assert held in [line["hook"] for line in with_event(lines, "hold.seen")]
    page.goto(f"{web}/")
    assert page.locator("#actions-table tr.gw-action").count() == 2
    assert "receiver moves to a new host" in page.inner_text("#actions-table")


def test_requeue_a_hooks_failed_requests_after_the_dry_run_and_one_request_from_its_page(
    phorge: Phorge, site: SiteDatabase, web: str, workers: Any, chromium: Any
) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/fixed/ok"), name="Fixed hook")
        wanted = [failed(phorge, hook, ago=600 - n) for n in range(5)]
        timeouts = [failed(phorge, hook, error='"errorType":"timeout","errorCode":28', ago=300) for _ in range(2)]
        workers("requeuer", "--poll-interval-ms", "100", **site.env).start()
        page = sign_in(chromium, web, OPERATOR)
        page.goto(f"{web}/hooks/{hook}/")
        page.fill("#requeue-error", "http/503")
        page.fill("#requeue-since", "1h")
        page.get_by_role("button", name="Dry run").click()
        assert page.inner_text("#dry-run-count") == "5 failed requests would be requeued"
        listed = page.locator("#dry-run-list tbody tr").evaluate_all("rows => rows.map(r => r.dataset.phid)")
        assert listed == wanted and not set(timeouts) & set(listed)
        assert all(phorge.row(phid)["status"] == "failed" for phid in wanted), "the dry run changed nothing"
        page.get_by_role("button", name="Requeue", exact=True).click()
        page.wait_for_url(f"{web}/hooks/{hook}/#actions")
        expect(action_row(page, "requeue", "done")).to_have_count(1, timeout=DONE_WITHIN_MS)
        assert "requeued the 5 requests shown" in page.inner_text("#actions-table")
        sent = {phorge.row(phid)["objectPHID"] for phid in wanted}
        wait_for(lambda: set(calls(receiver, "/fixed/")) == sent, 30, "the requeued deliveries")

        one = timeouts[0]
        page.goto(f"{web}/requests/{one}/")
        page.get_by_role("button", name="Requeue", exact=True).click()
        page.wait_for_url(f"{web}/requests/{one}/#actions")
        expect(action_row(page, "requeue", "done")).to_have_count(1, timeout=DONE_WITHIN_MS)
        assert "requeued the request" in page.inner_text("#actions-table")
        sent.add(phorge.row(one)["objectPHID"])
        wait_for(lambda: set(calls(receiver, "/fixed/")) == sent, 30, "the one request delivered")
        wait_for(lambda: all(phorge.row(phid)["status"] == "sent" for phid in [*wanted, one]), 10, "the results")
        time.sleep(0.5)
        assert calls(receiver, "/fixed/") == Counter(sent), "each exactly once"
        assert phorge.row(timeouts[1])["status"] == "failed", "not shown, not requeued"
    assert [(kind, request, by, state, n) for kind, _h, request, by, _f, state, n, _o in audit(site)] == [
        ("requeue", "", OPERATOR[0], "done", 5),
        ("requeue", one, OPERATOR[0], "done", 1),
    ]
    page.goto(f"{web}/admin/delivery_status/operatoraction/")
    assert page.locator("#result_list tbody tr").count() == 2
    assert "requeued the 5 requests shown" in page.inner_text("#result_list")


def test_a_post_without_the_csrf_token_from_staff_without_the_permission_or_anonymous_does_nothing(
    phorge: Phorge, site: SiteDatabase, web: str, workers: Any, chromium: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Some hook")
    request = failed(phorge, hook)
    workers("watching", "--poll-interval-ms", "100", **site.env).start()
    key = "k" * 32
    posts = [
        (f"/hooks/{hook}/hold/", {"form_key": key, "reason": "x"}),
        (f"/hooks/{hook}/release/", {"form_key": key}),
        (f"/hooks/{hook}/requeue/", {"form_key": key, "ids": str(phorge.row(request)["id"])}),
        (f"/requests/{request}/requeue/", {"form_key": key}),
    ]

    operator = sign_in(chromium, web, OPERATOR)
    for path, data in posts:  # no CSRF token: Django refuses before any view runs
        assert operator.request.post(f"{web}{path}", form=data).status == 403, path

    looker = sign_in(chromium, web, LOOKER)
    for path in (f"/hooks/{hook}/", f"/requests/{request}/"):
        looker.goto(f"{web}{path}")
        assert looker.locator("#operate").count() == 0 and looker.locator("button:text('Hold')").count() == 0
    token = next(c["value"] for c in looker.context.cookies() if c["name"] == "csrftoken")
    for path, data in posts:
        answer = looker.request.post(f"{web}{path}", form={**data, "csrfmiddlewaretoken": token})
        assert answer.status == 403, path

    anonymous = chromium.new_context().new_page()
    anonymous.goto(f"{web}/admin/login/")
    token = next(c["value"] for c in anonymous.context.cookies() if c["name"] == "csrftoken")
    for path, data in posts:
        answer = anonymous.request.post(f"{web}{path}", form={**data, "csrfmiddlewaretoken": token}, max_redirects=0)
        assert answer.status == 302 and "/admin/login/" in answer.headers["location"], path

    time.sleep(2.5)  # two looks of the worker for actions
    assert audit(site) == [] and site.sql("SELECT COUNT(*) FROM delivery_status_hookhold") == [(0,)]
    assert phorge.row(request)["status"] == "failed"


def test_the_forms_fit_a_1280_px_window(
    phorge: Phorge, site: SiteDatabase, web: str, chromium: Any, tmp_path: Path
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Wide hook")
    failed(phorge, hook)
    page = sign_in(chromium, web, OPERATOR)
    page.set_viewport_size({"width": 1280, "height": 900})
    for path, shown in ((f"/hooks/{hook}/", "#operate"), (f"/hooks/{hook}/requeue/?since=1h", "#requeue-confirm")):
        page.goto(f"{web}{path}")
        assert page.locator(shown).is_visible(), path
        page.screenshot(path=str(tmp_path / f"{shown[1:]}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280, path


def test_after_an_outage_retry_now_sends_each_waiting_request_once_at_once_one_call_at_a_time(
    phorge: Phorge, site: SiteDatabase, web: str, workers: Any, chromium: Any
) -> None:
    """Herald's requests (retry=forever) stay queued through a receiver's outage and wait out Phorge's 300 s
    backoff after each failed attempt; fixed, the receiver gets them all within seconds of Retry now."""
    with Receiver(slow_seconds=0.2) as receiver:
        receiver.state.down.add("/back")
        hook = phorge.hook(receiver.url("/back/slow"), name="Recovered hook")
        objects = seed(phorge, [hook], 6)
        worker = workers("outage", "--poll-interval-ms", "100", **site.env).start()
        failing = "SELECT COUNT(*) FROM herald_webhookrequest WHERE status = 'queued' AND lastRequestResult = 'fail'"
        wait_for(lambda: phorge.execute(failing)[0][0] == 6, 60, "each request failed once, in its backoff")
        assert count_status(phorge, "queued") == 6, "retry=forever: none is failed"
        receiver.state.down.clear()  # the receiver is fixed
        fixed_at = time.time()
        page = sign_in(chromium, web, OPERATOR)
        page.goto(f"{web}/hooks/{hook}/")
        assert "6 queued requests failed within the last 5 min; the next is tried at" in page.inner_text("#retry-form")
        page.get_by_role("button", name="Retry now: dry run").click()
        assert page.inner_text("#retry-count") == "6 requests wait on their retry backoff"
        assert "The hook's breaker is closed" in page.inner_text("#retry-dry-run")
        assert not [r for r in receiver.requests if r.at >= fixed_at], "nothing tried since: all in their backoff"
        page.get_by_role("button", name="Retry now", exact=True).click()
        page.wait_for_url(f"{web}/hooks/{hook}/#actions")
        expect(action_row(page, "retry", "done")).to_have_count(1, timeout=DONE_WITHIN_MS)
        assert "6 requests (Recovered hook) that failed up to " in page.inner_text("#actions-table")
        wait_for(lambda: count_status(phorge, "sent") == 6, 30, "all six delivered, long before their backoff ends")
        time.sleep(0.5)
        answered = [r for r in receiver.requests if r.at >= fixed_at]
        assert Counter(r.object_phid for r in answered) == Counter(objects), "each exactly once"
        assert receiver.state.max_in_flight["/back"] == 1, "one call at a time for the hook, as always"
        assert time.time() - fixed_at < 300 - 30, "not at the end of the backoff"
    lines = worker.lines()
    assert [line["kind"] for line in with_event(lines, "action.done")] == ["retry"]
    assert hook in [line["hook"] for line in with_event(lines, "retry.order_seen")]
    assert not with_event(lines, "breaker.entered")


def test_a_requeue_pressed_while_no_worker_runs_goes_out_within_seconds_of_the_workers_start(
    phorge: Phorge, site: SiteDatabase, web: str, workers: Any, chromium: Any
) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/later/ok"), name="Later hook")
        request = failed(phorge, hook)
        page = sign_in(chromium, web, OPERATOR)
        page.goto(f"{web}/requests/{request}/")
        page.get_by_role("button", name="Requeue", exact=True).click()
        page.wait_for_url(f"{web}/requests/{request}/#actions")
        ((asked,),) = site.sql("SELECT requested_at FROM delivery_status_operatoraction")
        until = (asked + timedelta(minutes=10)).strftime("%H:%M:%S")
        said = f"no worker is running: this action waits until {until} UTC, then expires"
        assert said in page.inner_text("#actions-table")
        assert page.locator("#requeue-request-form").count() == 0, "no second Requeue while one waits"
        assert "A requeue of this request is waiting for a worker" in page.inner_text("#operate")
        worker = workers("late", "--poll-interval-ms", "100", **site.env).start()
        started = time.time()
        wait_for(lambda: calls(receiver, "/later/") == Counter([phorge.row(request)["objectPHID"]]), 60, "the call")
        assert time.time() - started < 60, "not at the window's sweep, ten minutes later"
        expect(action_row(page, "requeue", "done")).to_have_count(1, timeout=DONE_WITHIN_MS)
    lines = worker.lines()
    assert [line["hook"] for line in with_event(lines, "requeue.notice_taken")] == [hook]


def test_the_pending_expired_forbidden_and_no_permission_pages_say_what_happens(
    phorge: Phorge, site: SiteDatabase, web: str, chromium: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Words hook")
    failed(phorge, hook)
    operator = sign_in(chromium, web, OPERATOR)
    operator.goto(f"{web}/hooks/{hook}/")
    operator.get_by_role("button", name="Hold", exact=True).click()
    operator.wait_for_url(f"{web}/hooks/{hook}/#actions")
    assert "no worker is running: this action waits until " in operator.inner_text("#actions-table")
    assert operator.locator("#hold-form").count() == 0 and operator.locator("#hold-pending").count() == 1
    site.sql("UPDATE delivery_status_operatoraction SET requested_at = requested_at - INTERVAL 11 MINUTE")
    operator.goto(f"{web}/hooks/{hook}/")
    assert action_row(operator, "hold", "expired").count() == 1
    assert "no worker took it within 10 minutes: nothing was done" in operator.inner_text("#actions-table")
    assert site.sql("SELECT state FROM delivery_status_operatoraction") == [("expired",)]

    looker = sign_in(chromium, web, LOOKER)
    looker.goto(f"{web}/hooks/{hook}/requeue/")
    assert "There is no button here for you: to requeue them an account needs the permission" in looker.inner_text(
        "#no-button"
    )
    token = next(c["value"] for c in looker.context.cookies() if c["name"] == "csrftoken")
    answer = looker.request.post(f"{web}/hooks/{hook}/hold/", form={"form_key": "k" * 32, "csrfmiddlewaretoken": token})
    assert answer.status == 403
    looker.set_content(answer.text())
    assert "You are signed in as web-looker, whose account does not hold the permission operate webhooks" in (
        looker.inner_text("#forbidden-why")
    )
    assert "Nothing was done." in looker.inner_text("#forbidden-why") and "Traceback" not in answer.text()
