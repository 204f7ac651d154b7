"""The dashboard (web/dashboard.py) in a real headless browser (Debian's chromium), logged in through the
admin form."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import PHORGE_DB, Phorge, random_phid, viewer
from tests.support.receiver import Receiver
from tests.support.ui_helpers import seed_bulk
from webhook_delivery.records.models import WorkerHeartbeat
from webhook_delivery.worker.loop import build_worker

pytestmark = [PHORGE_DB, pytest.mark.browser]


def log_in(page: Any, base: str, user: str, password: str, *, at: str = "/") -> None:
    page.goto(f"{base}{at}")
    assert "/admin/login/" in page.url
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}{at}")


def test_staff_dashboard_in_chromium(
    live_server: Any, phorge: Phorge, django_user_model: Any, tmp_path: Path, chromium: Any
) -> None:
    bulk = seed_bulk(phorge, rows=1500, spread_sec=6 * 3600)
    phorge.request(phorge.hook("http://127.0.0.1:9/unsigned", key="", name="unsigned hook"))
    now = datetime.now(UTC)
    WorkerHeartbeat.objects.create(
        worker_id="deliver-1",
        hostname="deliver-1",
        pid=4242,
        started_at=now,
        last_seen=now,
        state={"max_concurrent": 16, "in_flight": 3, "counts": {"degraded.result_write_retry": 1}},
    )
    viewer(django_user_model)

    foreign: list[str] = []
    refused: list[str] = []
    page = chromium.new_page(viewport={"width": 1440, "height": 900})
    page.on("request", lambda r: None if r.url.startswith(live_server.url) else foreign.append(r.url))
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    log_in(page, live_server.url, "operator", "pw-operator-1")
    policy = page.request.get(live_server.url + "/").headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy

    counts = {name: int(page.inner_text(f"#count-{name}")) for name in ("queued", "sent", "failed", "due")}
    assert counts["sent"] > 1000 and counts["failed"] > 100 and counts["queued"] > 10
    assert counts["due"] >= 1
    rows = page.locator("#hooks tbody tr")
    assert rows.count() == 7
    failing = page.locator(f'#hooks tr[data-phid="{bulk.failing}"]')
    assert failing.get_attribute("data-state") == "failing"
    assert failing.locator(".gw-badge").first.inner_text() == "failing"
    assert "HTTP 50" in failing.inner_text()
    assert page.locator('#hooks tr[data-state="misconfigured"]').count() == 1

    chart = page.locator("svg.gw-chart")
    assert chart.count() == 1 and chart.is_visible()
    assert int(chart.get_attribute("data-sent-total") or 0) > 1000
    assert int(chart.get_attribute("data-failed-total") or 0) > 100
    assert len(chart.locator('path[data-series="sent"]').get_attribute("d") or "") > 1000
    assert chart.bounding_box()["width"] > 800  # type: ignore[index]

    assert page.locator("#failures tbody tr").count() == 20
    assert page.locator('#workers tr[data-state="ok"]').count() == 1
    assert page.locator("#php-worker").get_attribute("data-state") == "unknown"
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    assert not foreign, f"the page loaded something from elsewhere: {foreign}"
    assert not refused, f"the Content-Security-Policy refused part of the page: {refused}"
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


def test_admin_finds_the_webhooks_of_an_object_or_a_hook_at_1280_px(
    live_server: Any, phorge: Phorge, django_user_model: Any, tmp_path: Path, chromium: Any
) -> None:
    build = phorge.hook("http://127.0.0.1:9/build", name="Build bot")
    chat = phorge.hook("http://127.0.0.1:9/chat", name="Chat bridge")
    task = random_phid("TASK")
    wanted = phorge.request(build, object_phid=task)
    for _ in range(30):
        phorge.request(chat)
    phorge.request(build)
    django_user_model.objects.create_superuser("root-ish", password="pw-root-ish-1")
    listing = "/admin/webhook_delivery/heraldwebhookrequest/"
    page = chromium.new_page(viewport={"width": 1280, "height": 800})
    log_in(page, live_server.url, "root-ish", "pw-root-ish-1", at=listing)

    page.fill("#searchbar", task)
    page.press("#searchbar", "Enter")
    page.wait_for_load_state()
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    assert wanted in rows.first.inner_text() and "Build bot" in rows.first.inner_text()
    assert "TASK" in rows.first.inner_text()

    page.fill("#searchbar", "chat")
    page.press("#searchbar", "Enter")
    page.wait_for_load_state()
    assert page.locator("#result_list tbody tr").count() == 30
    assert all("Chat bridge" in text for text in page.locator("#result_list tbody tr").all_inner_texts())
    page.screenshot(path=str(tmp_path / "requests.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"the page is {width} px wide"
    scroll, shown = page.evaluate(
        "[document.querySelector('.results').scrollWidth, document.querySelector('.results').clientWidth]"
    )
    assert scroll <= shown, f"the list is cut off: {scroll} px in {shown}"


def test_from_the_dashboard_to_a_hook_and_a_request_in_chromium(
    live_server: Any, phorge: Phorge, django_user_model: Any, tmp_path: Path, chromium: Any, delivery_config: Any
) -> None:
    with Receiver() as receiver:
        healthy = phorge.hook(receiver.url("/fine/ok"), name="Healthy hook")
        broken = phorge.hook(receiver.url("/broken/s500"), name="Broken hook")
        for _ in range(6):
            phorge.request(healthy)
        failed = phorge.request(broken)
        build_worker(delivery_config, once=True).run()
        assert len(receiver.requests) == 7
    viewer(django_user_model)
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server.url, "operator", "pw-operator-1")

    page.click(f'#hooks tr[data-phid="{healthy}"] a:text("Healthy hook")')
    page.wait_for_url(f"{live_server.url}/hooks/{healthy}/")
    assert "6 of 6 attempts" in page.inner_text("#success-3600")
    assert "p50" in page.inner_text("#latency-3600") and "- ms" not in page.inner_text("#latency-3600")
    assert page.locator('#attempts tr[data-result="okay"]').count() == 6
    page.screenshot(path=str(tmp_path / "hook.png"), full_page=True)

    page.goto(f"{live_server.url}/")
    page.click(f'#failures a[href="/requests/{failed}/"]')
    page.wait_for_url(f"{live_server.url}/requests/{failed}/")
    steps = page.locator("#timeline li")
    assert steps.count() == 1 and "HTTP 500" in steps.first.inner_text()
    assert "failed" in page.inner_text("#phorge-row")
    page.screenshot(path=str(tmp_path / "request.png"), full_page=True)
    page.click("text=Broken hook")
    page.wait_for_url(f"{live_server.url}/hooks/{broken}/")
    assert "0.0 %" in page.inner_text("#success-3600")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_no_page_asks_for_a_favicon_in_chromium(
    live_server: Any, phorge: Phorge, django_user_model: Any, chromium: Any
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/icon", name="Icon hook")
    request = phorge.request(hook)
    django_user_model.objects.create_superuser("operator", password="pw-operator-1")
    asked: list[str] = []
    page = chromium.new_page()
    page.on("request", lambda r: asked.append(r.url) if "favicon" in r.url else None)
    log_in(page, live_server.url, "operator", "pw-operator-1")  # the login page, then the dashboard
    for path in (f"/hooks/{hook}/", f"/requests/{request}/", "/admin/webhook_delivery/heraldwebhookrequest/"):
        page.goto(f"{live_server.url}{path}")
        icon = page.locator('link[rel="icon"]')
        assert icon.count() == 1 and (icon.get_attribute("href") or "").startswith("data:image/svg+xml,"), path
    page.wait_for_timeout(300)
    assert asked == []


TEMPLATE_SYNTAX = ("{#", "#}", "{{", "}}", "{%", "%}")


def test_no_page_shows_template_syntax_with_every_kind_of_state_present(
    live_server: Any, phorge: Phorge, django_user_model: Any, chromium: Any, worker_db: Any
) -> None:
    """Every page the URL walk reaches, with alerts, holds, losses, stopped and silent workers, a partitioned
    map and odd rows present, rendered by Chromium: none of Django's template syntax in what a person reads."""
    from tests.support.urlwalk import every_page
    from webhook_delivery.alerts.models import AlertCondition, AlertNotification, HookLoss
    from webhook_delivery.records.holds import hold

    bulk = seed_bulk(phorge, rows=300, spread_sec=3 * 3600)
    odd = phorge.hook("http://127.0.0.1:9/odd", name="odd <b>hook</b> & co", key="")
    phorge.request(odd, properties="not json at all", status="failed", lastRequestResult="none")
    phorge.request(odd, properties='{"errorType":"http","errorCode":"²"}', status="failed", lastRequestResult="fail")
    hold(bulk.failing, reason="receiver moving", held_by="ops")
    HookLoss.objects.create(hook_phid=bulk.failing, hook_name="bulk hook 5", lost_total=3)
    now = datetime.now(UTC)
    AlertCondition.objects.create(
        key=f"receiver:{bulk.failing}",
        kind="receiver",
        hook_phid=bulk.failing,
        hook_name="bulk hook 5",
        since=now,
        entered_at=now,
        summary="Hook `bulk hook 5` has been failing since 20:02 UTC (43 min).",
    )
    AlertNotification.objects.create(
        key=f"receiver:{bulk.failing}",
        episode=1,
        transition="entered",
        kind="receiver",
        channel="email",
        subject="[gorge-webhook] Hook `bulk hook 5` failing",
        text="ALERT      ...",
        created_at=now,
    )
    for worker_id, state, seen in (("gone:1:aaaaaa", {"stopped": "clean"}, 600), ("quiet:2:bbbbbb", {}, 900)):
        WorkerHeartbeat.objects.create(
            worker_id=worker_id,
            hostname=worker_id.split(":")[0],
            pid=1,
            started_at=now,
            last_seen=datetime.fromtimestamp(now.timestamp() - seen, UTC),
            state=state,
        )
    worker_db.create(["meta_data"])
    worker_db.partition_map(
        [
            {"host": "127.0.0.1", "port": 3306, "role": "master", "partition": ["default"]},
            {"host": "10.9.9.9", "port": 3306, "role": "master", "partition": ["maniphest"]},
        ]
    )
    viewer(django_user_model)
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server.url, "operator", "pw-operator-1")
    seen = []
    for path in every_page():
        if "logout" in path:
            continue  # a POST, and the walk must stay logged in
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None
        if "json" in (response.headers.get("content-type") or "") or path.endswith(("metrics", "healthz", "readyz")):
            continue
        text = page.inner_text("body")
        leaked = [mark for mark in TEMPLATE_SYNTAX if mark in text]
        assert not leaked, f"{path} shows {leaked}: {text[:500]}"
        seen.append(path)
    assert "/" in seen and any(p.startswith("/hooks/") for p in seen) and any(p.startswith("/requests/") for p in seen)
    assert any(p.startswith("/admin/") for p in seen)
    dashboard = page.goto(f"{live_server.url}/")
    assert dashboard is not None
    board = page.inner_text("body")
    assert "Held hooks" in board and "Active alerts" in board
    assert "The last one, gone:1:aaaaaa, stopped cleanly at" in board
