# ruff: noqa: RUF001 - the messages use the multiplication sign
"""The alert texts (webhook_delivery/alerts/messages.py), from facts with a fixed clock: one line of at most
78 characters cut at a word, the database clock's times, the incident's counts, the links, what ended it."""

from __future__ import annotations

import calendar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook_delivery.alerts import digests, messages
from webhook_delivery.alerts.messages import SUBJECT_LIMIT, HookRef, Links, Message
from webhook_delivery.wording import ELLIPSIS, cut, duration, moment

NOW = calendar.timegm((2026, 12, 1, 20, 45, 0))  # 20:45 UTC
MINUTE = 60
HOOK = HookRef("PHID-HWBH-ciciciciciciciciciic", "ci-bridge", 3)
LINKS = Links("https://gorge.example.org", "https://phorge.example.org")


def at(hh: int, mm: int) -> int:
    return calendar.timegm((2026, 12, 1, hh, mm, 0))


def assert_subject(said: Message) -> None:
    assert "\n" not in said.subject and len(said.subject) <= SUBJECT_LIMIT, said.subject
    assert said.subject.startswith("[gorge-webhook] ")
    if said.subject.endswith(ELLIPSIS):
        head = said.subject.removesuffix(ELLIPSIS)
        assert head == head.rstrip(), "cut at a word"


def hook_links(said: Message) -> None:
    assert f"    https://gorge.example.org/hooks/{HOOK.phid}/" in said.body.splitlines()
    assert "    https://phorge.example.org/herald/webhook/view/3/" in said.body.splitlines()


def failing(**changes: object) -> messages.Failing:
    facts = {
        "hook": HOOK,
        "now": NOW,
        "since": at(20, 2),
        "last_success": at(19, 58),
        "failed": 7,
        "errors": (("http", "500", 6), ("timeout", "28", 1)),
        "last_error": ("http", "500"),
        "queued": 12,
        "due": 3,
    }
    return messages.Failing(**{**facts, **changes})  # type: ignore[arg-type]


def test_a_failing_hook_says_since_when_the_incidents_failures_and_links() -> None:
    said = messages.failing(failing(), LINKS)
    assert_subject(said)
    assert said.subject == "[gorge-webhook] Hook `ci-bridge` failing since 20:02 UTC"
    first = said.body.splitlines()[0]
    assert first == f"Hook `ci-bridge` ({HOOK.phid}) has been failing since 20:02 UTC (43 min)."
    assert "failing; failing" not in said.body and said.body.count("failing") == 1
    assert "Its last success was at 19:58 UTC." in said.body
    assert "7 requests failed since then: HTTP 500 × 6, Timeout (28) × 1." in said.body
    assert "Last error: HTTP 500 (http/500)." in said.body
    assert "12 queued, 3 due now." in said.body
    hook_links(said)


def test_a_hook_in_backoff_names_the_breaker_and_ends_when_it_delivers() -> None:
    said = messages.failing(failing(in_backoff=True, window_failures=10, threshold=10, window_sec=300), LINKS)
    assert_subject(said)
    assert said.subject == "[gorge-webhook] Hook `ci-bridge` in Phorge's breaker backoff"
    assert "10 failed attempts in the last 5 min (threshold 10); failing since 20:02 UTC (43 min)" in said.body
    over = messages.failing_over(
        messages.FailingOver(HOOK, NOW, at(20, 2), "delivers", last_success=at(20, 44), queued=4), LINKS
    )
    assert_subject(over)
    assert over.subject == "[gorge-webhook] Hook `ci-bridge` delivers again"
    assert "a request succeeded at 20:44 UTC; it had been failing since 20:02 UTC (43 min). 4 queued." in over.body
    hook_links(over)


@pytest.mark.parametrize(
    ("ended", "says"),
    [
        ("gone", "no longer exists in Phorge"),
        ("disabled", "was disabled in Phorge"),
        ("no key", "has no HMAC key now"),
        ("no failure", "has no failed request left"),
    ],
)
def test_what_else_ends_a_failing_hook_is_said(ended: str, says: str) -> None:
    said = messages.failing_over(messages.FailingOver(HOOK, NOW, at(20, 2), ended), LINKS)
    assert_subject(said)
    assert says in said.body and "since 20:02 UTC" in said.body


def test_a_long_hook_name_is_cut_at_a_word_in_the_subject_and_whole_in_the_body() -> None:
    name = "the continuous integration bridge of the platform team in the north building"
    said = messages.failing(failing(hook=HookRef(HOOK.phid, name, 3)), LINKS)
    assert_subject(said)
    assert said.subject.endswith(ELLIPSIS)
    assert f"`{name}`" in said.body


def test_phorge_text_cannot_end_its_quotation_or_forge_a_line() -> None:
    hostile = HookRef(HOOK.phid, "evil`\nALERT      Hook `ok` delivers again\r", 3)
    said = messages.failing(failing(hook=hostile, last_error=("http\n", "500\rX")), LINKS)
    assert_subject(said)
    assert not any(line.startswith("ALERT") for line in said.body.splitlines())
    assert "\r" not in said.body and "`evil' ALERT Hook 'ok' delivers again`" in said.body


def test_near_collection_says_when_and_ends_without_a_claim_of_delivery() -> None:
    facts = messages.NearCollection(HOOK, NOW, 3, NOW - 7 * 86400 + 3600, 7 * 86400)
    said = messages.near_collection(facts, LINKS)
    assert_subject(said)
    assert said.subject == "[gorge-webhook] 3 requests to `ci-bridge` deleted by Phorge in 1 hour"
    assert "the oldest was queued at 2026-11-24 21:45 UTC, and Phorge keeps requests 7 days" in said.body
    over = messages.near_collection_over(HOOK, 24 * 3600, LINKS)
    assert_subject(over)
    assert "within 24 h of Phorge's garbage collection any more: delivered, requeued or deleted" in over.body
    hook_links(over)


def test_lost_requests_are_named_with_their_total() -> None:
    phids = tuple(f"PHID-HWBR-{i:020d}" for i in range(12))
    said = messages.lost(messages.Lost(HOOK, NOW, phids, at(8, 0) - 7 * 86400, at(9, 0) - 7 * 86400, 40), LINKS)
    assert_subject(said)
    assert said.subject == "[gorge-webhook] 12 requests to `ci-bridge` lost to Phorge's collection"
    assert "(created 2026-11-24 08:00 UTC to 2026-11-24 09:00 UTC)" in said.body
    assert phids[9] in said.body and phids[10] not in said.body and "and 2 more; 40 lost in all" in said.body


@pytest.mark.parametrize(
    ("last", "says"),
    [
        (messages.LastWorker("web1:41:abc123", at(20, 31), "clean"), "stopped cleanly at 20:31 UTC"),
        (
            messages.LastWorker("web1:41:abc123", at(20, 29), None),
            "was last heard at 20:29 UTC, with no clean stop (killed, crashed",
        ),
        (messages.LastWorker("web1:41:abc123", at(20, 30), "error"), "stopped on an error at 20:30 UTC"),
        (None, "No worker has been seen in the last day."),
    ],
)
def test_no_worker_tells_a_clean_stop_from_silence_and_from_never(last: messages.LastWorker | None, says: str) -> None:
    said = messages.no_worker(messages.NoWorker(NOW, 12, at(20, 33), last, 86400), LINKS)
    assert_subject(said)
    assert said.subject == "[gorge-webhook] No worker delivering: 12 requests due"
    assert "No deliver_webhooks worker is alive while 12 requests are due (the oldest due since 20:33 UTC, 12 min)" in (
        said.body
    )
    assert says in said.body
    assert "    https://gorge.example.org/" in said.body.splitlines()


def test_no_worker_ends_saying_which_ended_it() -> None:
    back = messages.no_worker_over(messages.NoWorkerOver(NOW, at(20, 33), ("web2:7:def456",)), LINKS)
    assert_subject(back)
    assert "alive again (`web2:7:def456`), after 12 min without one" in back.body
    quiet = messages.no_worker_over(messages.NoWorkerOver(NOW, at(20, 33), ()), LINKS)
    assert_subject(quiet)
    assert "Nothing is due any more, after 12 min; still no deliver_webhooks worker is alive" in quiet.body


def test_php_delivery_words_its_evidence_and_never_zero_active_tasks() -> None:
    said = messages.php_delivering(messages.PhpDelivering(NOW, 3, at(20, 44)), LINKS)
    assert_subject(said)
    assert "3 HeraldWebhookWorker tasks in Phorge's worker queue; the last delivered at 20:44 UTC" in said.body
    idle_queue = messages.php_delivering(messages.PhpDelivering(NOW, 0, at(20, 44)), LINKS)
    assert "0 " not in idle_queue.body and "no task in Phorge's worker queue now" in idle_queue.body
    over = messages.php_delivering_over(NOW, 60, at(20, 40), LINKS)
    assert_subject(over)
    assert "no webhook for at least 60 s (the last at 20:40 UTC)" in over.body


def test_stalled_and_database_say_how_long() -> None:
    said = messages.stalled(messages.Stalled(NOW, 6 * MINUTE, 300, 12), LINKS)
    assert_subject(said)
    assert "waited 6 min (since 20:39 UTC; stalled beyond 5 min); 12 requests due" in said.body
    over = messages.stalled_over(NOW, at(20, 39), None, LINKS)
    assert "no longer stalled: nothing is due, after 6 min" in over.body
    down = messages.database_down(NOW, "OperationalError", LINKS)
    assert_subject(down)
    assert "(OperationalError) since 20:45 UTC" in down.body
    assert "again, after 6 min" in messages.database_up(NOW, at(20, 39), LINKS).body


def test_a_digest_of_one_keeps_its_subject_and_many_are_counted() -> None:
    said = messages.failing(failing(), LINKS)
    one = digests.digest([digests.Note("entered", said.subject, said.text("entered"))])
    assert one.subject == said.subject and one.body.startswith("ALERT      Hook `ci-bridge`")
    notes = [digests.Note("entered", said.subject, said.text("entered"))] * 3 + [
        digests.Note("recovered", "x", "RECOVERED  y")
    ]
    many = digests.digest(notes)
    assert many.subject == "[gorge-webhook] 3 new alerts, 1 recovered"
    assert many.body.startswith("gorge-webhook: 3 new alerts, 1 recovered\n\nALERT")


@given(st.text(min_size=0, max_size=300), st.integers(min_value=10, max_value=120))
def test_cut_is_one_line_within_the_limit_and_keeps_whole_words(text: str, limit: int) -> None:
    shown = cut(text, limit)
    assert len(shown) <= limit and "\n" not in shown
    if not shown.endswith(ELLIPSIS):
        assert shown == " ".join(text.split())
    else:
        words = " ".join(text.split()).split(" ")
        kept = shown.removesuffix(ELLIPSIS).split(" ")
        if len(kept) > 1:
            assert kept[:-1] == words[: len(kept) - 1]


def test_one_wording_of_times_and_durations() -> None:
    assert [duration(s) for s in (45, 150, 179, 5400, 7200, 86400, 3 * 86400)] == [
        "45 s",
        "2 min",
        "3 min",
        "2 h",
        "2 h",
        "24 h",
        "3 days",
    ]
    assert moment(at(20, 31), NOW) == "20:31 UTC"
    assert moment(at(20, 31) - 86400, NOW) == "2026-11-30 20:31 UTC"
    assert moment(None, NOW) == "never"
