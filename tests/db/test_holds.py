"""`manage.py hold_webhooks`: a held hook's requests stay queued, byte for byte, with no call, through `--once`
runs and running workers; each goes out once after the release; running workers see a hold and a release
within seconds; an outage of Django's database neither releases a hold nor stops the other hooks.

Here: what runs on Django's test databases; the rest is in tests/process/test_holds.py."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.core.management import CommandError

from tests.support.helpers import PHORGE_DB, Phorge, holds, random_phid, raw_rows
from tests.support.processes import count_status, seed
from tests.support.receiver import Receiver, calls
from webhook_delivery.records.holds import REASON_MAX, active_holds, hold_of
from webhook_delivery.records.models import HookHold
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB


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
        assert worker.snapshot().hooks_held == (held,)
    holds("--release", "--hook", held)
    worker = build_worker(delivery_config, once=True)
    worker.run()
    assert not any("held hook" in line for line in worker.summary())
    assert calls(receiver, "/held/") == Counter(held_objects)  # each exactly once
    assert count_status(phorge, "sent") == 110 and count_status(phorge, "queued") == 0
