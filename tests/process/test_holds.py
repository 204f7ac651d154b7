"""`manage.py hold_webhooks`: a held hook's requests stay queued, byte for byte, with no call, through `--once`
runs and running workers; each goes out once after the release; running workers see a hold and a release
within seconds; an outage of Django's database neither releases a hold nor stops the other hooks.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/db/test_holds.py."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from tests.support.helpers import PHORGE_DB, Phorge, raw_rows, with_event
from tests.support.processes import SiteDatabase, count_status, seed
from tests.support.receiver import Receiver, calls
from tests.support.waiting import wait_for
from webhook_delivery.worker.loop import HEARTBEAT_SEC

pytestmark = PHORGE_DB


SEEN_WITHIN = 2 * HEARTBEAT_SEC + 2  # a heartbeat, and the poll after it, with room for a loaded machine


def held_in_heartbeat(site: SiteDatabase) -> set[str]:
    """The held hooks every live worker's newest heartbeat names (an empty set without heartbeats)."""
    states = [json.loads(state) for (state,) in site.sql("SELECT state FROM delivery_status_workerheartbeat")]
    if not states:
        return set()
    return set.intersection(*(set(state.get("hooks_held", ["<none yet>"])) for state in states))


def timed_wait(condition: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    wait_for(condition, timeout, what)
    return time.monotonic() - started


@pytest.mark.slow
def test_a_running_worker_honours_a_hold_made_before_it_started_and_sees_the_release(
    phorge: Phorge, workers: Any, site: SiteDatabase
) -> None:
    with Receiver() as receiver:
        held = phorge.hook(receiver.url("/held/ok"))
        other = phorge.hook(receiver.url("/other/ok"))
        held_objects = seed(phorge, [held], 100)
        site.command("hold_webhooks", "--hook", held, "--reason", "receiver down for maintenance")
        before = raw_rows(phorge, held)
        worker = workers("held", "--poll-interval-ms", "100", **site.env).start()
        other_objects = seed(phorge, [other], 20)
        wait_for(lambda: calls(receiver, "/other/") == Counter(other_objects), 30, "the other hook's deliveries")
        wait_for(lambda: held_in_heartbeat(site) == {held}, 15, "the hold in the heartbeat")
        time.sleep(1.0)  # ten more polls
        assert raw_rows(phorge, held) == before and not calls(receiver, "/held/")
        assert site.command("hold_webhooks", "--release", "--hook", held).returncode == 0
        took = timed_wait(
            lambda: calls(receiver, "/held/") == Counter(held_objects), SEEN_WITHIN + 20, "the released deliveries"
        )
        assert took < SEEN_WITHIN + 10
        wait_for(lambda: count_status(phorge, "sent") == 120, 10, "the results written")
        time.sleep(0.5)
        assert calls(receiver, "/held/") == Counter(held_objects)  # each exactly once
    lines = worker.lines()
    assert held in [line["hook"] for line in with_event(lines, "hold.seen")]
    assert held in [line["hook"] for line in with_event(lines, "hold.release_seen")]


@pytest.mark.slow
def test_a_hold_made_while_a_worker_runs_is_honoured_within_seconds(
    phorge: Phorge, workers: Any, site: SiteDatabase
) -> None:
    with Receiver() as receiver:
        held = phorge.hook(receiver.url("/held/ok"))
        other = phorge.hook(receiver.url("/other/ok"))
        workers("running", "--poll-interval-ms", "100", **site.env).start()
        probe = seed(phorge, [held], 1)
        wait_for(lambda: calls(receiver, "/held/") == Counter(probe), 30, "the probe delivery")
        done = site.command("hold_webhooks", "--hook", held, "--reason", "flapping receiver")
        assert f"Held {held}" in done.stdout
        took = timed_wait(lambda: held_in_heartbeat(site) == {held}, SEEN_WITHIN, "the hold in the heartbeat")
        assert took < SEEN_WITHIN
        held_objects = seed(phorge, [held], 100)
        before = raw_rows(phorge, held)
        other_objects = seed(phorge, [other], 50)
        wait_for(lambda: calls(receiver, "/other/") == Counter(other_objects), 30, "the other hook's deliveries")
        time.sleep(1.0)
        assert raw_rows(phorge, held) == before and calls(receiver, "/held/") == Counter(probe)
        site.command("hold_webhooks", "--release", "--hook", held)
        took = timed_wait(
            lambda: calls(receiver, "/held/") == Counter(probe + held_objects), SEEN_WITHIN + 20, "the release"
        )
        assert took < SEEN_WITHIN + 10
        wait_for(lambda: held_in_heartbeat(site) == set(), SEEN_WITHIN, "the release in the heartbeat")


@pytest.mark.slow
def test_an_outage_of_djangos_database_keeps_the_holds_and_the_other_hooks_flowing(
    phorge: Phorge, workers: Any, site: SiteDatabase
) -> None:
    with Receiver() as receiver:
        held = phorge.hook(receiver.url("/held/ok"))
        other = phorge.hook(receiver.url("/other/ok"))
        site.command("hold_webhooks", "--hook", held)
        worker = workers("outage", "--poll-interval-ms", "100", **site.env).start()
        wait_for(lambda: held_in_heartbeat(site) == {held}, 30, "the hold in the heartbeat")
        # The holds cannot be read any more (the heartbeats still can: only this table is gone).
        site.sql("RENAME TABLE delivery_status_hookhold TO hookhold_away")
        wait_for(
            lambda: with_event(worker.lines(), "hold.read_failed"),
            SEEN_WITHIN,
            "the failed read",
        )
        held_objects = seed(phorge, [held], 30)
        before = raw_rows(phorge, held)
        other_objects = seed(phorge, [other], 30)
        wait_for(lambda: calls(receiver, "/other/") == Counter(other_objects), 30, "the other hook's deliveries")
        time.sleep(HEARTBEAT_SEC + 1)  # another failed read: still held
        assert raw_rows(phorge, held) == before and not calls(receiver, "/held/")
        assert held_in_heartbeat(site) == {held}
        site.sql("RENAME TABLE hookhold_away TO delivery_status_hookhold")
        site.command("hold_webhooks", "--release", "--hook", held)
        wait_for(lambda: calls(receiver, "/held/") == Counter(held_objects), SEEN_WITHIN + 20, "the release")
    lines = worker.lines()
    assert len(with_event(lines, "hold.read_failed")) == 1
    assert with_event(lines, "hold.read_again")


@pytest.mark.slow
def test_hold_returns_once_running_workers_start_no_more_calls_for_the_hook(
    phorge: Phorge, workers: Any, site: SiteDatabase
) -> None:
    with Receiver(slow_seconds=0.05) as receiver:
        busy = phorge.hook(receiver.url("/busy/slow"))
        also = phorge.hook(receiver.url("/also/slow"))
        workers("running", "--poll-interval-ms", "50", **site.env).start()
        seed(phorge, [busy], 400)
        seed(phorge, [also], 400)
        wait_for(lambda: len(calls(receiver, "/busy/")) >= 5, 30, "the hook's deliveries flowing")
        done = site.command("hold_webhooks", "--hook", busy, "--hook", also, "--reason", "both receivers move")
        returned = time.time()
        assert f"Held {busy}" in done.stdout and f"Held {also}" in done.stdout, "every --hook is held"
        assert "Every running worker (1) has read the 2 holds" in done.stdout
        started_after = [
            r for r in list(receiver.requests) if r.path.startswith(("/busy/", "/also/")) and r.at > returned
        ]
        assert len(started_after) <= 2, "at most the calls already under way, one per hook"
        time.sleep(1.0)
        assert [r for r in list(receiver.requests) if r.at > returned + 0.2] == []
        assert {phid for phid, _, _, _ in holds_listed(site)} == {busy, also}


def holds_listed(site: SiteDatabase) -> list[tuple[str, ...]]:
    lines = site.command("hold_webhooks", "--list").stdout.splitlines()
    return [tuple(line.split("\t")) for line in lines if line.startswith("PHID-")]


@pytest.mark.slow
def test_hold_says_which_running_workers_have_not_confirmed(phorge: Phorge, site: SiteDatabase) -> None:
    from datetime import UTC, datetime

    hook = phorge.hook("http://127.0.0.1:9/x")
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    site.sql(  # a worker that beats but never reads holds (a version before them, or stuck)
        "INSERT INTO delivery_status_workerheartbeat (worker_id, hostname, pid, started_at, last_seen, state) "
        f"VALUES ('old:1:abcdef', 'old', 1, '{now}', '{now}', '{{}}')"
    )
    started = time.monotonic()
    done = site.command("hold_webhooks", "--hook", hook)
    assert time.monotonic() - started < 30
    assert "1 running worker(s) have not confirmed the hold within 15 s (old:1:abcdef)" in done.stdout
