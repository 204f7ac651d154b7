"""Each alert condition (webhook_delivery/alerts/conditions.py) on a pass answered from memory: what it
observes (key, since, sustain, the subject) and what its end says, with no database. The conditions read
everything through their Pass; MemoryPass gives them Phorge's queue, the heartbeats, the PHP guard,
Phorge's settings and the watcher's reads as the test sets them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings

from webhook_delivery.alerts.conditions import (
    CONDITIONS,
    Collection,
    Database,
    NoWorker,
    Observation,
    Pass,
    PhpDelivering,
    Receivers,
    Remembered,
    Stalled,
)
from webhook_delivery.alerts.config import AlertConfig
from webhook_delivery.alerts.messages import Links
from webhook_delivery.phorge.names import ObjectName
from webhook_delivery.reads.health import HookHealth, LagThresholds, QueueHealth
from webhook_delivery.reads.watching import Incident, LastError, NearCollection
from webhook_delivery.records.heartbeat import WorkerStatus
from webhook_delivery.state import PhpDelivery, Stopped, WorkerState

NOW = 1_764_620_000  # Phorge's database clock in this pass
HOOK = "PHID-HWBH-conditionsconditions01"
CONFIG = AlertConfig(email_to=("ops@example.com",), site_url="https://gorge.example.org", worker_dead_sec=30)
LINKS = Links("https://gorge.example.org", "https://phorge.example.org")
THRESHOLDS = LagThresholds(late_after=30, stalled_after=300)
IDLE = PhpDelivery("idle", 0, 0, 0, None, "")


class MemoryPass(Pass):
    """A watcher pass that answers from memory: what Phorge's tables, the heartbeats and the attempt log
    would have said."""

    def __init__(
        self,
        health: QueueHealth | None,
        *,
        config: AlertConfig = CONFIG,
        workers: Sequence[WorkerStatus] = (),
        php: PhpDelivery = IDLE,
        retention: int | None = 30 * 86400,
        incidents: Mapping[str, Incident] | None = None,
        last_errors: Mapping[str, LastError] | None = None,
        near: Sequence[NearCollection] = (),
        names: Mapping[str, ObjectName] | None = None,
        logged: Mapping[str, int] | None = None,
        error: str = "",
    ) -> None:
        super().__init__(NOW, health, config, settings.GORGE_WEBHOOK, datetime.fromtimestamp(NOW, UTC))
        self.error = error
        # The cached properties, answered before they are read (an instance's value wins over them).
        self.links = LINKS
        self.workers = list(workers)
        self.php = php
        self.retention = retention
        self._incidents = dict(incidents or {})
        self._last_errors = dict(last_errors or {})
        self._near = list(near)
        self._names = dict(names or {})
        self._logged = dict(logged or {})
        self.asked: dict[str, Any] = {}

    def incidents(self, last_success: Mapping[str, int]) -> dict[str, Incident]:
        self.asked["incidents"] = dict(last_success)
        return {phid: incident for phid, incident in self._incidents.items() if phid in last_success}

    def last_errors(self, phids: Sequence[str]) -> dict[str, LastError]:
        self.asked["last_errors"] = list(phids)
        return {phid: error for phid, error in self._last_errors.items() if phid in phids}

    def near_collection(self, phids: Sequence[str], edge: int) -> list[NearCollection]:
        self.asked["near_collection"] = (list(phids), edge)
        return [near for near in self._near if near.hook_phid in phids]

    def object_names(self, phids: Iterable[str]) -> dict[str, ObjectName]:
        wanted = set(phids)
        return {phid: name for phid, name in self._names.items() if phid in wanted}

    def first_logged_failures(self, hooks: Sequence[HookHealth]) -> dict[str, int]:
        return {hook.phid: self._logged[hook.phid] for hook in hooks if hook.phid in self._logged}


def hook(**fields: Any) -> HookHealth:
    defaults: dict[str, Any] = {"phid": HOOK, "name": "ci builds", "id": 7, "status": "enabled", "misconfigured": False}
    return HookHealth(**(defaults | fields))


def queue(*hooks: HookHealth) -> QueueHealth:
    return QueueHealth(NOW, hooks, THRESHOLDS, error_threshold=10, error_window_sec=300)


def worker(seen_ago: int, *, stopped: Stopped | None = None, stopping: bool = False) -> WorkerStatus:
    seen = datetime.fromtimestamp(NOW - seen_ago, UTC)
    return WorkerStatus(
        worker_id="web1:42:abcdef",
        hostname="web1",
        pid=42,
        started_at=seen - timedelta(hours=1),
        last_seen=seen,
        seen_ago_sec=seen_ago,
        alive=seen_ago < 30,
        beat=WorkerState(max_concurrent=16, stopping=stopping, stopped=stopped, phorge_now=NOW - seen_ago),
    )


def remembered(observation: Observation) -> Remembered:
    """The condition as the watcher records it when it starts: what its end is told from."""
    return Remembered(
        observation.key, observation.hook_phid, observation.hook_name, observation.since, observation.detail
    )


def one(observations: list[Observation]) -> Observation:
    assert len(observations) == 1, observations
    return observations[0]


def subject_line(text: str) -> None:
    assert text and "\n" not in text and len(text) <= 78, text


def test_every_condition_is_in_the_table_once() -> None:
    assert set(CONDITIONS) == {"database", "receiver", "no_worker", "php_delivery", "stalled", "collection"}
    assert {kind: type(condition) for kind, condition in CONDITIONS.items()} == {
        "database": Database,
        "receiver": Receivers,
        "no_worker": NoWorker,
        "php_delivery": PhpDelivering,
        "stalled": Stalled,
        "collection": Collection,
    }
    at_once = [kind for kind, condition in CONDITIONS.items() if condition.hold_sec(CONFIG) == 0]
    assert sorted(at_once) == ["collection", "no_worker", "receiver"]
    assert CONDITIONS["stalled"].hold_sec(CONFIG) == CONDITIONS["database"].hold_sec(CONFIG) == CONFIG.interval_sec
    assert CONDITIONS["php_delivery"].hold_sec(CONFIG) == max(CONFIG.php_hold_sec, CONFIG.interval_sec)


# -- receivers ---------------------------------------------------------------------------------------


def test_a_failing_hook_is_told_from_its_first_failure_and_sustained_until_the_failing_time() -> None:
    failing = hook(queued=3, due=3, last_success=NOW - 3600, last_failed_attempt=NOW - 60, window_failures=2)
    task = "PHID-TASK-conditionsconditions1"
    now = MemoryPass(
        queue(failing),
        incidents={HOOK: Incident(first=NOW - 600, requests=3, errors=(("http", "503", 3),))},
        last_errors={HOOK: LastError("http", "503", "PHID-HWBR-conditionsconditio1", task)},
        names={task: ObjectName("T12", "T12: Flaky build", "/T12")},
        logged={HOOK: NOW - 700},  # the attempt log remembers an earlier failure than Phorge's rows
    )
    seen = one(Receivers().observe(now))
    assert (seen.key, seen.kind, seen.since) == (f"receiver:{HOOK}", "receiver", NOW - 700)
    assert seen.sustain, "failing for under GORGE_ALERT_FAILING_MINUTES: only kept, not told"
    assert (seen.hook_phid, seen.hook_name, seen.detail) == (
        HOOK,
        "ci builds",
        {"hook_id": 7, "failed": 3, "backoff": False, "error": "http/503"},
    )
    subject_line(seen.message.subject)
    assert "ci builds" in seen.message.subject
    assert "T12" in seen.message.body and "503" in seen.message.body
    assert now.asked["incidents"] == {HOOK: NOW - 3600} and now.asked["last_errors"] == [HOOK]


def test_a_hook_in_backoff_is_told_at_once_and_one_failing_long_enough_too() -> None:
    backoff = hook(queued=5, in_backoff=True, last_failed_attempt=NOW - 10, window_failures=10)
    seen = one(Receivers().observe(MemoryPass(queue(backoff))))
    assert seen.since == NOW - 10 and not seen.sustain, "the breaker is open: told at once"
    assert "ci builds" in seen.message.subject
    long_failing = hook(queued=1, last_failed_attempt=NOW - 5, last_success=None)
    incident = Incident(first=NOW - 7200, requests=1, errors=())
    told = one(Receivers().observe(MemoryPass(queue(long_failing), incidents={HOOK: incident})))
    assert told.since == NOW - 7200 and not told.sustain, "failing for two hours"


def test_healthy_disabled_and_missing_hooks_are_no_receiver_condition() -> None:
    healthy = hook(queued=2, last_success=NOW - 5, last_failed_attempt=NOW - 60)
    disabled = hook(phid="PHID-HWBH-conditionsconditions02", status="disabled", last_failed_attempt=NOW)
    assert Receivers().observe(MemoryPass(queue(healthy, disabled))) == []
    assert Receivers().observe(MemoryPass(None)) == [], "herald does not answer: the database condition says so"


@pytest.mark.parametrize(
    ("now_hook", "ended"),
    [
        (None, "no longer exists"),
        ({"status": "disabled"}, "disabled"),
        ({"misconfigured": True}, "HMAC key"),
        ({"last_success": NOW - 5}, "delivers"),
        ({"last_success": NOW - 7200, "last_failed_attempt": NOW - 60}, "no failed request"),
    ],
    ids=["gone", "disabled", "no key", "delivers", "no failure"],
)
def test_a_receiver_condition_ends_saying_what_ended_it(now_hook: dict[str, Any] | None, ended: str) -> None:
    start = one(Receivers().observe(MemoryPass(queue(hook(in_backoff=True, last_failed_attempt=NOW - 600)))))
    row = remembered(start)
    later = MemoryPass(queue() if now_hook is None else queue(hook(**now_hook)))
    message = Receivers().ended(row, later)
    subject_line(message.subject)
    assert "ci builds" in message.subject
    assert ended in message.body, message.body


# -- Phorge's collection -----------------------------------------------------------------------------


def test_requests_near_phorges_collection_are_told_from_when_they_came_within_the_warning() -> None:
    retention = 7 * 86400
    queued = hook(queued=40, due=40)
    oldest = NOW - retention + 3600  # collected in an hour
    now = MemoryPass(queue(queued), retention=retention, near=[NearCollection(HOOK, 40, oldest)])
    seen = one(Collection().observe(now))
    assert (seen.key, seen.kind) == (f"collection:{HOOK}", "collection")
    assert seen.since == oldest + retention - int(CONFIG.gc_warning_sec) and not seen.sustain
    assert seen.detail == {"count": 40, "deadline": oldest + retention, "hook_id": 7}
    assert now.asked["near_collection"] == ([HOOK], NOW - retention + int(CONFIG.gc_warning_sec))
    subject_line(seen.message.subject)
    assert "ci builds" in seen.message.subject and "40" in seen.message.body
    message = Collection().ended(remembered(seen), MemoryPass(queue(hook())))
    subject_line(message.subject)
    assert "ci builds" in message.subject


def test_no_collection_condition_without_retention_queued_requests_or_herald() -> None:
    near = [NearCollection(HOOK, 1, NOW - 86400)]
    assert Collection().observe(MemoryPass(queue(hook(queued=1)), retention=None, near=near)) == []
    assert Collection().observe(MemoryPass(queue(hook(queued=0)), near=near)) == []
    assert Collection().observe(MemoryPass(None, near=near)) == []


# -- workers -----------------------------------------------------------------------------------------


def test_due_requests_and_no_worker_alive_are_told_since_the_last_worker_was_heard() -> None:
    due = hook(queued=4, due=4, oldest_due_since=NOW - 120)
    seen = one(NoWorker().observe(MemoryPass(queue(due), workers=[worker(90, stopped="clean")])))
    assert (seen.key, seen.kind, seen.since, seen.sustain) == ("no_worker", "no_worker", NOW - 90, False)
    assert seen.detail == {"due": 4}
    subject_line(seen.message.subject)
    assert "worker" in seen.message.subject.lower()
    assert "stopped cleanly" in seen.message.body
    never = one(NoWorker().observe(MemoryPass(queue(due))))
    assert never.since == NOW - 120, "no worker ever heard: since the oldest due request"
    ended = NoWorker().ended(remembered(seen), MemoryPass(queue(due), workers=[worker(1)]))
    subject_line(ended.subject)
    assert "web1:42:abcdef" in ended.body


def test_a_live_worker_a_young_backlog_or_held_requests_are_no_worker_condition() -> None:
    due = hook(queued=4, due=4, oldest_due_since=NOW - 120)
    assert NoWorker().observe(MemoryPass(queue(due), workers=[worker(5)])) == []
    young = hook(queued=4, due=4, oldest_due_since=NOW - 10)
    assert NoWorker().observe(MemoryPass(queue(young))) == [], "a starting worker has not reported yet"
    held = hook(queued=4, due=4, oldest_due_since=NOW - 120, on_hold=True)
    assert NoWorker().observe(MemoryPass(queue(held))) == [], "held requests are nobody's to deliver"
    stopping = [worker(5, stopping=True)]
    assert len(NoWorker().observe(MemoryPass(queue(due), workers=stopping))) == 1, "a stopping worker is not alive"


def test_phorges_php_worker_delivering_is_told_from_its_last_delivery_and_ends_with_it() -> None:
    active = PhpDelivery("active", 2, 1, 3, NOW - 20, "")
    seen = one(PhpDelivering().observe(MemoryPass(queue(), php=active)))
    assert (seen.key, seen.kind, seen.since, seen.sustain) == ("php_delivery", "php_delivery", NOW - 20, False)
    assert seen.detail == {"last_delivery": NOW - 20}
    subject_line(seen.message.subject)
    assert "PHP" in seen.message.subject
    assert PhpDelivering().observe(MemoryPass(queue(), php=IDLE)) == []
    assert PhpDelivering().observe(MemoryPass(queue(), php=PhpDelivery.unknown("not readable"))) == []
    ended = PhpDelivering().ended(remembered(seen), MemoryPass(queue(), php=IDLE))
    subject_line(ended.subject)
    assert "PHP" in ended.subject


# -- the queue as a whole ----------------------------------------------------------------------------


def test_a_stalled_queue_is_told_from_when_its_oldest_due_request_came_due() -> None:
    stuck = hook(queued=9, due=9, oldest_due_since=NOW - 400)
    seen = one(Stalled().observe(MemoryPass(queue(stuck))))
    assert (seen.key, seen.kind, seen.since, seen.sustain) == ("stalled", "stalled", NOW - 400, False)
    assert seen.detail == {"age": 400}
    subject_line(seen.message.subject)
    late = hook(queued=9, due=9, oldest_due_since=NOW - 100)
    assert Stalled().observe(MemoryPass(queue(late))) == [], "late, not stalled"
    assert Stalled().observe(MemoryPass(None)) == []
    ended = Stalled().ended(remembered(seen), MemoryPass(queue(late)))
    subject_line(ended.subject)
    assert Stalled().ended(remembered(seen), MemoryPass(None)).subject


def test_herald_not_answering_is_the_database_condition_with_the_reason() -> None:
    seen = one(Database().observe(MemoryPass(None, error="OperationalError")))
    assert (seen.key, seen.kind, seen.since, seen.sustain) == ("database", "database", NOW, False)
    subject_line(seen.message.subject)
    assert "OperationalError" in seen.message.body
    assert Database().observe(MemoryPass(queue())) == []
    ended = Database().ended(dataclasses.replace(remembered(seen), since=NOW - 300), MemoryPass(queue()))
    subject_line(ended.subject)


def test_every_condition_has_its_kind_among_those_exported_and_stored() -> None:
    """models.KINDS names the kinds the metric is exported for and the dashboard lists: one per condition."""
    from webhook_delivery.alerts.conditions import CONDITIONS
    from webhook_delivery.alerts.models import KINDS

    assert sorted(KINDS) == sorted(CONDITIONS)
