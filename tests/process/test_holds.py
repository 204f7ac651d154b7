"""`manage.py hold_webhooks`: a held hook's requests stay queued, byte for byte, with no call, through `--once`
runs and running workers; each goes out once after the release; running workers see a hold and a release
within seconds; an outage of Django's database neither releases a hold nor stops the other hooks."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.helpers import PHORGE_DB, Phorge, random_phid, worker_env
from tests.processes import ROOT, count_status, seed, wait_for
from tests.receiver import Receiver
from webhook_delivery.records.holds import REASON_MAX, active_holds, hold_of
from webhook_delivery.records.models import HookHold
from webhook_delivery.worker.loop import HEARTBEAT_SEC, build_worker

pytestmark = PHORGE_DB
SEEN_WITHIN = 2 * HEARTBEAT_SEC + 2  # a heartbeat, and the poll after it, with room for a loaded machine


def holds(*args: str) -> str:
    out = io.StringIO()
    call_command("hold_webhooks", *args, stdout=out)
    return out.getvalue()


def raw_rows(phorge: Phorge, hook: str) -> list[tuple[Any, ...]]:
    """Every column of the hook's requests, as the driver returns them (bytes for Phorge's binary columns)."""
    return list(phorge.execute("SELECT * FROM herald_webhookrequest WHERE webhookPHID = %s ORDER BY id", (hook,)))


def calls(receiver: Receiver, prefix: str) -> Counter[str]:
    """Object PHIDs the receiver was sent under this path prefix, with how often each came."""
    return Counter(r.object_phid for r in list(receiver.requests) if r.path.startswith(prefix))


class Shared:
    """Django's database in a SQLite file, shared by the test, the worker processes and the command."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "django.sqlite3"
        self.env = {"DATABASE_URL": f"sqlite:///{self.path}"}
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=worker_env(**self.env),
            check=True,
        )

    def command(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "hold_webhooks", *args],
            cwd=ROOT,
            env=worker_env(**self.env),
            capture_output=True,
            text=True,
            check=check,
        )

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path, timeout=10) as db:
            return db.execute(statement).fetchall()

    def held_in_heartbeat(self) -> set[str]:
        """The held hooks every live worker's newest heartbeat names (an empty set without heartbeats)."""
        states = [json.loads(state) for (state,) in self.sql("SELECT state FROM delivery_status_workerheartbeat")]
        if not states:
            return set()
        return set.intersection(*(set(state.get("hooks_held", ["<none yet>"])) for state in states))


def timed_wait(condition: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    wait_for(condition, timeout, what)
    return time.monotonic() - started


# -- the command -------------------------------------------------------------------------------------


def test_bad_input_is_refused_and_nothing_is_stored(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    missing = random_phid("HWBH")
    with pytest.raises(CommandError, match=f"no hook {missing} in Phorge's herald_webhook"):
        holds("--hook", missing)
    for bad in ["nonsense", "PHID-HWBR-aaaaaaaaaaaaaaaaaaaa", f"{hook}\n", "PHID-HWBH-", f"{hook}' OR 1=1"]:
        with pytest.raises(CommandError, match="is not a hook PHID"):
            holds("--hook", bad)
    for reason in ["red \x1b[31malert", "two\nlines", "tab\there", "bell\x07", "\u202eesrever", "del\x7f", "c1\x9b"]:
        with pytest.raises(CommandError, match="may not contain control characters") as refused:
            holds("--hook", hook, "--reason", reason)
        assert "\x1b" not in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(CommandError, match=f"at most {REASON_MAX}"):
        holds("--hook", hook, "--reason", "x" * (REASON_MAX + 1))
    with pytest.raises(CommandError, match="may not contain control characters"):
        holds("--hook", hook, "--by", "mallory\x1b[2J")
    with pytest.raises(CommandError, match="is not held"):
        holds("--release", "--hook", hook)
    with pytest.raises(CommandError, match="--hook PHID is required"):
        holds()
    assert HookHold.objects.count() == 0


def test_hold_list_release(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Builds \x1b[31m")
    said = holds("--hook", hook, "--reason", "receiver migrates to new host, until 14:00 UTC", "--by", "alice")
    assert f"Held {hook} (Builds \\x1b[31m)" in said and "\x1b" not in said
    [hold] = active_holds()
    assert (hold.hook_phid, hold.held_by, hold.reason) == (
        hook,
        "alice",
        "receiver migrates to new host, until 14:00 UTC",
    )
    assert hold_of(hook) == hold
    again = holds("--hook", hook, "--reason", "something else", "--by", "bob")
    assert "already held: by alice since" in again and "Nothing was changed" in again
    assert hold_of(hook) == hold  # who held it and why are kept
    listed = holds("--list").splitlines()
    assert (
        len(listed) == 1
        and listed[0].startswith(f"{hook}\t")
        and listed[0].endswith("\talice\treceiver migrates to new host, until 14:00 UTC")
    )
    released = holds("--release", "--hook", hook)
    assert f"Released {hook} (held by alice since" in released
    assert active_holds() == [] and holds("--list").strip() == "No hook is held."


def test_a_missing_hook_can_still_be_released(phorge: Phorge) -> None:
    """A hook deleted in Phorge while held: its hold can be released all the same."""
    hook = phorge.hook("http://127.0.0.1:9/x")
    holds("--hook", hook, "--by", "alice")
    phorge.execute("DELETE FROM herald_webhook WHERE phid = %s", (hook,))
    assert "Released" in holds("--release", "--hook", hook)


def test_list_escapes_control_characters_whatever_was_stored(phorge: Phorge) -> None:
    """Rows written past the command's checks (an older version, a hand-made row) are still shown safely."""
    from datetime import UTC, datetime

    HookHold.objects.create(
        hook_phid=random_phid("HWBH"),
        reason="\x1b]0;owned\x07 \u202egnp.exe\r\nFAKE\tLINE",
        held_by="eve\x1b[2J",
        held_at=datetime.now(UTC),
    )
    out = holds("--list")
    for raw in ["\x1b", "\x07", "\u202e", "\r"]:
        assert raw not in out
    assert out.count("\n") == 1 and out.count("\t") == 3  # one line, four fields: the row's own tabs escaped
    assert "\\x1b]0;owned\\x07 \\u202egnp.exe\\r\\nFAKE\\tLINE" in out and "eve\\x1b[2J" in out


def test_the_fragment_shows_who_when_why_escaped(phorge: Phorge) -> None:
    from django.template.loader import render_to_string

    hook = phorge.hook("http://127.0.0.1:9/x")
    holds("--hook", hook, "--reason", "<script>alert(1)</script> & co", "--by", "alice")
    from webhook_delivery.web.views import HeldHook

    shown = [HeldHook(hold, "<b>ci</b> bridge", 7) for hold in active_holds()]
    html = render_to_string("webhook_delivery/_holds.html", {"holds": shown, "phorge_uri": "https://phorge.example"})
    assert hook in html and "alice" in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in html
    assert f'<a href="/hooks/{hook}/">&lt;b&gt;ci&lt;/b&gt; bridge</a>' in html, "the hook by name, linked"
    assert 'href="https://phorge.example/herald/webhook/view/7/"' in html
    assert "<script>" not in html and "<b>" not in html
    gone = render_to_string("webhook_delivery/_holds.html", {"holds": [HeldHook(active_holds()[0], None, None)]})
    assert "(hook gone from Phorge)" in gone and hook in gone
    assert render_to_string("webhook_delivery/_holds.html", {"holds": []}).strip() == ""


# -- workers -----------------------------------------------------------------------------------------


def test_once_runs_leave_a_held_hook_byte_identical_and_deliver_each_once_after_release(
    phorge: Phorge, receiver: Receiver, delivery_config: Any
) -> None:
    held = phorge.hook(receiver.url("/held/ok"))
    other = phorge.hook(receiver.url("/other/ok"))
    held_objects = seed(phorge, [held], 100)
    other_objects = seed(phorge, [other], 10)
    holds("--hook", held, "--reason", "maintenance", "--by", "ops")
    before = raw_rows(phorge, held)
    for _ in range(2):
        worker = build_worker(delivery_config, once=True)
        worker.run()
        assert raw_rows(phorge, held) == before
        assert not calls(receiver, "/held/")
        assert calls(receiver, "/other/") == Counter(other_objects)
        assert any(line.startswith("left the requests of 1 held hook(s)") for line in worker.summary())
        assert worker.snapshot()["hooks_held"] == [held]
    holds("--release", "--hook", held)
    worker = build_worker(delivery_config, once=True)
    worker.run()
    assert not any("held hook" in line for line in worker.summary())
    assert calls(receiver, "/held/") == Counter(held_objects)  # each exactly once
    assert count_status(phorge, "sent") == 110 and count_status(phorge, "queued") == 0


@pytest.mark.slow
def test_a_running_worker_honours_a_hold_made_before_it_started_and_sees_the_release(
    phorge: Phorge, workers: Any, tmp_path: Path
) -> None:
    shared = Shared(tmp_path)
    with Receiver() as receiver:
        held = phorge.hook(receiver.url("/held/ok"))
        other = phorge.hook(receiver.url("/other/ok"))
        held_objects = seed(phorge, [held], 100)
        shared.command("--hook", held, "--reason", "receiver down for maintenance")
        before = raw_rows(phorge, held)
        worker = workers("held", "--poll-interval-ms", "100", **shared.env).start()
        other_objects = seed(phorge, [other], 20)
        wait_for(lambda: calls(receiver, "/other/") == Counter(other_objects), 30, "the other hook's deliveries")
        wait_for(lambda: shared.held_in_heartbeat() == {held}, 15, "the hold in the heartbeat")
        time.sleep(1.0)  # ten more polls
        assert raw_rows(phorge, held) == before and not calls(receiver, "/held/")
        assert shared.command("--release", "--hook", held).returncode == 0
        took = timed_wait(
            lambda: calls(receiver, "/held/") == Counter(held_objects), SEEN_WITHIN + 20, "the released deliveries"
        )
        assert took < SEEN_WITHIN + 10
        wait_for(lambda: count_status(phorge, "sent") == 120, 10, "the results written")
        time.sleep(0.5)
        assert calls(receiver, "/held/") == Counter(held_objects)  # each exactly once
    messages = [line.get("message") for line in worker.lines()]
    assert "hook held: its requests stay queued until the hold is released" in messages
    assert "hook hold released: delivering its requests" in messages


@pytest.mark.slow
def test_a_hold_made_while_a_worker_runs_is_honoured_within_seconds(
    phorge: Phorge, workers: Any, tmp_path: Path
) -> None:
    shared = Shared(tmp_path)
    with Receiver() as receiver:
        held = phorge.hook(receiver.url("/held/ok"))
        other = phorge.hook(receiver.url("/other/ok"))
        workers("running", "--poll-interval-ms", "100", **shared.env).start()
        probe = seed(phorge, [held], 1)
        wait_for(lambda: calls(receiver, "/held/") == Counter(probe), 30, "the probe delivery")
        done = shared.command("--hook", held, "--reason", "flapping receiver")
        assert f"Held {held}" in done.stdout
        took = timed_wait(lambda: shared.held_in_heartbeat() == {held}, SEEN_WITHIN, "the hold in the heartbeat")
        assert took < SEEN_WITHIN
        held_objects = seed(phorge, [held], 100)
        before = raw_rows(phorge, held)
        other_objects = seed(phorge, [other], 50)
        wait_for(lambda: calls(receiver, "/other/") == Counter(other_objects), 30, "the other hook's deliveries")
        time.sleep(1.0)
        assert raw_rows(phorge, held) == before and calls(receiver, "/held/") == Counter(probe)
        shared.command("--release", "--hook", held)
        took = timed_wait(
            lambda: calls(receiver, "/held/") == Counter(probe + held_objects), SEEN_WITHIN + 20, "the release"
        )
        assert took < SEEN_WITHIN + 10
        wait_for(lambda: shared.held_in_heartbeat() == set(), SEEN_WITHIN, "the release in the heartbeat")


@pytest.mark.slow
def test_an_outage_of_djangos_database_keeps_the_holds_and_the_other_hooks_flowing(
    phorge: Phorge, workers: Any, tmp_path: Path
) -> None:
    shared = Shared(tmp_path)
    with Receiver() as receiver:
        held = phorge.hook(receiver.url("/held/ok"))
        other = phorge.hook(receiver.url("/other/ok"))
        shared.command("--hook", held)
        worker = workers("outage", "--poll-interval-ms", "100", **shared.env).start()
        wait_for(lambda: shared.held_in_heartbeat() == {held}, 30, "the hold in the heartbeat")
        # The holds cannot be read any more (the heartbeats still can: only this table is gone).
        shared.sql("ALTER TABLE delivery_status_hookhold RENAME TO hookhold_away")
        wait_for(
            lambda: any(line.get("message", "").startswith("cannot read hook holds") for line in worker.lines()),
            SEEN_WITHIN,
            "the failed read",
        )
        held_objects = seed(phorge, [held], 30)
        before = raw_rows(phorge, held)
        other_objects = seed(phorge, [other], 30)
        wait_for(lambda: calls(receiver, "/other/") == Counter(other_objects), 30, "the other hook's deliveries")
        time.sleep(HEARTBEAT_SEC + 1)  # another failed read: still held
        assert raw_rows(phorge, held) == before and not calls(receiver, "/held/")
        assert shared.held_in_heartbeat() == {held}
        shared.sql("ALTER TABLE hookhold_away RENAME TO delivery_status_hookhold")
        shared.command("--release", "--hook", held)
        wait_for(lambda: calls(receiver, "/held/") == Counter(held_objects), SEEN_WITHIN + 20, "the release")
    messages = [line.get("message") for line in worker.lines()]
    assert (
        messages.count("cannot read hook holds from Django's database (DATABASE_URL): keeping the holds last read") == 1
    )
    assert "hook holds read again" in messages


@pytest.mark.slow
def test_hold_returns_once_running_workers_start_no_more_calls_for_the_hook(
    phorge: Phorge, workers: Any, tmp_path: Path
) -> None:
    shared = Shared(tmp_path)
    with Receiver(slow_seconds=0.05) as receiver:
        busy = phorge.hook(receiver.url("/busy/slow"))
        also = phorge.hook(receiver.url("/also/slow"))
        workers("running", "--poll-interval-ms", "50", **shared.env).start()
        seed(phorge, [busy], 400)
        seed(phorge, [also], 400)
        wait_for(lambda: len(calls(receiver, "/busy/")) >= 5, 30, "the hook's deliveries flowing")
        done = shared.command("--hook", busy, "--hook", also, "--reason", "both receivers move")
        returned = time.time()
        assert f"Held {busy}" in done.stdout and f"Held {also}" in done.stdout, "every --hook is held"
        assert "Every running worker (1) has read the 2 holds" in done.stdout
        started_after = [
            r for r in list(receiver.requests) if r.path.startswith(("/busy/", "/also/")) and r.at > returned
        ]
        assert len(started_after) <= 2, "at most the calls already under way, one per hook"
        time.sleep(1.0)
        assert [r for r in list(receiver.requests) if r.at > returned + 0.2] == []
        assert {phid for phid, _, _, _ in holds_listed(shared)} == {busy, also}


def holds_listed(shared: Shared) -> list[tuple[str, ...]]:
    lines = shared.command("--list").stdout.splitlines()
    return [tuple(line.split("\t")) for line in lines if line.startswith("PHID-")]


@pytest.mark.slow
def test_hold_says_which_running_workers_have_not_confirmed(phorge: Phorge, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    shared = Shared(tmp_path)
    hook = phorge.hook("http://127.0.0.1:9/x")
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    shared.sql(  # a worker that beats but never reads holds (a version before them, or stuck)
        "INSERT INTO delivery_status_workerheartbeat (worker_id, hostname, pid, started_at, last_seen, state) "
        f"VALUES ('old:1:abcdef', 'old', 1, '{now}', '{now}', '{{}}')"
    )
    started = time.monotonic()
    done = shared.command("--hook", hook)
    assert time.monotonic() - started < 30
    assert "1 running worker(s) have not confirmed the hold within 15 s (old:1:abcdef)" in done.stdout
