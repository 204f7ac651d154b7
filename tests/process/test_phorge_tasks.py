"""The incident task in Phorge (GORGE_ALERT_PHORGE_TOKEN), against a stand-in of Phorge's Conduit written from
Phorge's source (tests/phorge_conduit_standin.py), Phorge's real tables in MariaDB, and for the process test
real watch_webhooks processes sharing Django's database: a task per episode of a condition, however many
watchers; a comment on a material change, not on every pass; resolved when the condition ends; a task a human
closed left alone; Conduit's refusals logged once and counted while the other channels go on; Phorge's text
neutral in the task; the token in no log line, page, JSON or metric."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.alert_channels import HOSTILE, Smtp, alert_config, configure_email, failing_hook, hostile_hook
from tests.support.helpers import PHORGE_DB, Phorge, viewer
from tests.support.phorge_conduit_standin import ConduitStandin
from tests.support.processes import SiteDatabase, WatcherProcess
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for
from webhook_delivery.alerts import messages, metrics, phorge_tasks, sending
from webhook_delivery.alerts.config import AlertConfig, load_alert_config
from webhook_delivery.alerts.models import AlertChannel, AlertTask
from webhook_delivery.alerts.watcher import Watcher

LITERAL = re.compile(r"%%%.*?%%%", re.DOTALL)


@pytest.fixture
def conduit() -> Iterator[ConduitStandin]:
    standin = ConduitStandin().start()
    standin.add_project("ops")
    yield standin
    standin.release()
    standin.stop()


def phorge_config(conduit: ConduitStandin, smtp: Smtp | None = None, **changes: Any) -> AlertConfig:
    phorge = {"phorge_token": conduit.token, "phorge_url": conduit.url, "phorge_tags": ("ops",)}
    return dataclasses.replace(alert_config(smtp, None), **{**phorge, **changes})


def outside_literals(text: str) -> str:
    return LITERAL.sub(" ", text)


def assert_neutral_remarkup(text: str) -> None:
    """Phorge's hostile text only inside literal blocks: outside them, nothing that Remarkup would make a
    mention, an object reference, a project tag, a link or markup."""
    outside = outside_literals(text)
    for hostile in ("@here", "@all", "@channel", "evil.example", "[x]", "<!channel>", "**", "{F", "#ops", "T1 "):
        assert hostile not in outside, f"{hostile!r} outside a literal block: {outside[:300]}"
    for block in LITERAL.findall(text):
        assert "%%%" not in block[3:-3], "a literal block that Phorge's text could end"


# -- what is told, and how ---------------------------------------------------------------------------------


def test_a_material_change_is_the_backoff_a_new_kind_of_error_or_a_doubled_count() -> None:
    told = phorge_tasks.facts("receiver", {"failed": 3, "backoff": False, "error": "http/500"})
    assert phorge_tasks.material(told, told) is None
    assert phorge_tasks.material(told, {**told, "failed": 5}) is None, "more of the same is not material"
    assert phorge_tasks.material(told, {**told, "failed": 6}) == "failed requests: 3 when last told, 6 now"
    assert phorge_tasks.material(told, {**told, "backoff": True}) == "the hook is now in Phorge's breaker backoff"
    assert phorge_tasks.material(told, {**told, "errors": ["curl/7"]}) == "a kind of error not told before"
    later = phorge_tasks.merged(told, {**told, "backoff": True, "errors": ["curl/7"]})
    back = {**told, "backoff": False, "errors": ["http/500"]}
    assert phorge_tasks.material(later, back) is None, "leaving the backoff, or an error told before: not again"
    assert phorge_tasks.material({"age": 400}, {"age": 800}) == "seconds: 400 when last told, 800 now"
    assert phorge_tasks.facts("database", {}) == {}


def test_remarkup_literal_blocks_hold_phorge_text_and_cannot_be_closed_by_it() -> None:
    hostile = "x %%% @here %%%%%% T1 #ops {F1} **b** [[/x|y]] ${{{strings.platform.server.name}}}%%"
    block = messages.literal(hostile)
    assert block.startswith("%%%") and block.endswith("%%%") and "%%%" not in block[3:-3]
    assert block[3:-3].replace(messages.JOINER, "") == hostile
    text = messages.task_opened(
        f"[gorge-webhook] Hook {messages.quoted(HOSTILE)} failing",
        f"Hook {messages.quoted(hostile)} has been failing.\n    https://gorge.example.com/hooks/PHID-HWBH-1/",
        "receiver:PHID-HWBH-1",
        2,
    )
    assert_neutral_remarkup(text.body)
    assert "\nhttps://gorge.example.com/hooks/PHID-HWBH-1/\n" in text.body, "our link, outside: a link"
    assert "@here" not in text.subject.split() and "://evil" not in text.subject


def test_phorge_settings_are_checked_and_the_token_never_repeated() -> None:
    secret = "api-" + "q" * 27 + "!"
    config, errors = load_alert_config(
        {
            "GORGE_ALERT_PHORGE_TOKEN": secret,
            "GORGE_ALERT_PHORGE_URL": "http://phorge.example.org",
            "GORGE_ALERT_PHORGE_PRIORITY": "very high",
            "GORGE_ALERT_PHORGE_TAGS": "#ops, PHID-PROJ-abc webhooks",
        }
    )
    assert [error.variable for error in errors] == [
        "GORGE_ALERT_PHORGE_TOKEN",
        "GORGE_ALERT_PHORGE_URL",
        "GORGE_ALERT_PHORGE_PRIORITY",
    ]
    assert secret not in " ".join(str(error) for error in errors) + repr(config)
    assert config.phorge_tags == ("ops", "PHID-PROJ-abc", "webhooks") and config.phorge_priority == "high"
    good, errors = load_alert_config(
        {"GORGE_ALERT_PHORGE_TOKEN": "api-" + "a" * 28, "GORGE_ALERT_PHORGE_URL": "http://127.0.0.1:9/"}
    )
    assert not errors and sending.channel_names(good) == ("phorge",) and good.phorge_url == "http://127.0.0.1:9"


def test_the_standin_decodes_the_encodings_conduit_accepts_and_answers_as_conduit(conduit: ConduitStandin) -> None:
    import requests

    def post(**kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = requests.post(f"{conduit.url}/api/user.whoami", timeout=5, **kwargs).json()
        assert set(answer) == {"result", "error_code", "error_info"}
        return answer

    token = json.dumps({"token": conduit.token})
    assert post(data={"params": json.dumps({"__conduit__": {"token": conduit.token}})})["result"]["phid"]
    assert post(data={"params[__conduit__]": token})["result"]["userName"] == conduit.bot_name
    assert post(data={"api.token": conduit.token})["result"]["phid"] == conduit.bot_phid
    assert post(json={"api.token": conduit.token})["error_code"] == "ERR-CONDUIT-CORE"
    refused = post(data={"api.token": "api-" + "b" * 28})
    assert refused["error_code"] == "ERR-INVALID-AUTH" and "api-bbbb" in refused["error_info"]
    assert post(data={})["error_code"] == "ERR-INVALID-SESSION"
    made = requests.post(
        f"{conduit.url}/api/maniphest.edit",
        data={"api.token": conduit.token, "transactions[0][type]": "title", "transactions[0][value]": "by curl"},
        timeout=5,
    ).json()["result"]
    assert made["object"]["id"] == 1 and made["object"]["phid"].startswith("PHID-TASK-")
    assert [(call.method, call.encoding) for call in conduit.calls][:3] == [
        ("user.whoami", "params-json"),
        ("user.whoami", "params-fields"),
        ("user.whoami", "form"),
    ]


# -- the channel, in a watcher -------------------------------------------------------------------------------


def _recover(phorge: Phorge) -> None:
    now = phorge.now()
    phorge.execute(
        "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = %s",
        (now + 1,),
    )
    time.sleep(1.1)  # a newer observation than the last one applied (Phorge's clock has 1 s steps)


def _fail_more(phorge: Phorge, hook: str, number: int) -> None:
    now = phorge.now()
    for _ in range(number):
        phorge.request(
            hook,
            properties=json.dumps(
                {"retry": "forever", "transactionPHIDs": [], "triggerPHIDs": [hook], "errorType": "http"}
                | {"errorCode": "500"}
            ),
            lastRequestResult="fail",
            lastRequestEpoch=now,
            dateModified=now,
        )


def _quiet_for_a_while() -> None:
    AlertTask.objects.update(told_at=datetime.now(UTC) - timedelta(seconds=phorge_tasks.COMMENT_EVERY_SEC + 1))


@PHORGE_DB
def test_a_task_when_it_starts_a_comment_on_a_material_change_resolved_when_it_ends(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = hostile_hook(phorge, receiver)
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    watcher = Watcher(phorge_config(conduit), delivery)
    result = watcher.tick()
    assert result.sent == {"phorge": 1}
    [task] = conduit.task_list()
    assert task.author == conduit.bot_phid and task.priority == "high" and task.projects == [conduit.projects["ops"]]
    assert task.title.startswith("[gorge-webhook] Hook `")  # the alert's subject, cut at 78 characters
    assert "@here" not in task.title.split() and "://evil" not in task.title
    assert_neutral_remarkup(task.description)
    assert hook in task.description and "3 requests have failed" in task.description
    assert f"\nhttps://gorge.example.com/hooks/{hook}/\n" in task.description
    assert messages.incident_marker(f"receiver:{hook}", 1) in task.description
    row = AlertTask.objects.get()
    assert (row.state, row.task_id, row.uri) == ("open", 1, f"{conduit.url}/T1")

    for _ in range(3):
        watcher.tick()
    assert task.comments == [] and len(conduit.edits()) == 1, "nothing new: no comment"
    _fail_more(phorge, hook, 3)  # 6 failed now, twice what the task said
    watcher.tick()
    assert len(conduit.edits()) == 1, "a material change waits until the task has been quiet a while"
    _quiet_for_a_while()
    watcher.tick()
    [task] = conduit.task_list()
    [comment] = task.comments
    assert comment.startswith("The alert changed (failed requests: 3 when last told, 6 now). Now:")
    assert_neutral_remarkup(comment)
    _quiet_for_a_while()
    watcher.tick()
    assert len(conduit.task_list()[0].comments) == 1, "told once"

    _recover(phorge)
    assert watcher.tick().recovered == [f"receiver:{hook}"]
    watcher.tick()
    [task] = conduit.task_list()
    assert task.status == "resolved" and task.closer == conduit.bot_phid and len(task.comments) == 2
    assert task.comments[1].startswith("The alert ended, so gorge-webhook resolves this task:")
    assert "delivers again" in task.comments[1]
    assert_neutral_remarkup(task.comments[1])
    assert AlertTask.objects.get().state == "resolved"
    assert conduit.token not in caplog.text


@PHORGE_DB
def test_a_task_closed_by_a_human_is_neither_commented_on_nor_reopened(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, settings: Any
) -> None:
    hook = failing_hook(phorge, receiver, "closed-by-hand")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    watcher = Watcher(phorge_config(conduit), delivery)
    watcher.tick()
    conduit.close(1, "wontfix")
    _fail_more(phorge, hook, 6)
    _quiet_for_a_while()
    watcher.tick()
    assert AlertTask.objects.get().state == "closed"
    _recover(phorge)
    watcher.tick()
    watcher.tick()
    [task] = conduit.task_list()
    assert task.status == "wontfix" and task.comments == [], "left as the human left it"
    assert len(conduit.edits()) == 1
    searches = [call for call in conduit.calls if call.method == "maniphest.search"]
    assert searches, "its status was read before it would have been commented on"

    # The next episode is a new incident: a new task.
    time.sleep(1.1)  # failures after the success
    _fail_more(phorge, hook, 3)
    watcher.tick()
    assert [t.id for t in conduit.task_list()] == [1, 2]
    assert AlertTask.objects.filter(key=f"receiver:{hook}", episode=2, state="open").exists()


@PHORGE_DB
def test_a_bad_token_is_logged_once_and_counted_while_mail_goes_out(
    phorge: Phorge,
    receiver: Receiver,
    conduit: ConduitStandin,
    smtp: Smtp,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for key, value in configure_email(smtp).items():
        setattr(settings, key, value)
    failing_hook(phorge, receiver, "told-by-mail")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    wrong = "api-" + "w" * 28  # of Phorge's form, but not a token Phorge knows
    watcher = Watcher(phorge_config(conduit, smtp, phorge_token=wrong), delivery)
    failed = metrics.NOTIFICATIONS_FAILED.labels("phorge")._value.get()
    refused = metrics.CONDUIT_ERRORS.labels("ERR-INVALID-AUTH")._value.get()
    for _ in range(3):
        result = watcher.tick()
        AlertChannel.objects.update(retry_at=None)  # the backoff's wait, over
    assert len(smtp.bodies) == 1, "the mail went out"
    assert result.failed == {"phorge": "Conduit ERR-INVALID-AUTH"}
    failing = [r for r in caplog.records if getattr(r, "event", "") == "alert.channel_failing"]
    assert [(getattr(r, "channel", ""), getattr(r, "error", "")) for r in failing] == [
        ("phorge", "Conduit ERR-INVALID-AUTH")
    ]
    assert metrics.NOTIFICATIONS_FAILED.labels("phorge")._value.get() - failed == 3
    assert metrics.CONDUIT_ERRORS.labels("ERR-INVALID-AUTH")._value.get() - refused == 3
    assert AlertTask.objects.get().state == "creating" and not conduit.task_list()
    assert wrong not in caplog.text, "Phorge's error text quotes the token: it is never logged"

    # The right token: the task is made, once.
    watcher = Watcher(phorge_config(conduit, smtp), delivery)
    watcher.tick()
    assert len(conduit.task_list()) == 1 and AlertTask.objects.get().state == "open"
    assert [r.getMessage() for r in caplog.records].count("alert channel works again: pending alerts sent") == 1


@PHORGE_DB
def test_a_policy_refusal_phorge_down_and_a_lost_answer_make_the_task_once(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    failing_hook(phorge, receiver, "bumpy")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    watcher = Watcher(phorge_config(conduit, channel_timeout_sec=2.0), delivery)

    def attempt() -> dict[str, str]:
        AlertChannel.objects.update(retry_at=None)
        return watcher.tick().failed

    conduit.can_create = False
    assert attempt() == {"phorge": "Conduit ERR-CONDUIT-CORE (a policy refusal)"}
    conduit.can_create = True
    conduit.outage = True
    assert attempt() == {"phorge": "Phorge: HTTP 502"}
    conduit.outage = False
    conduit.lose_edits = 1  # Phorge makes the task; its answer never comes
    assert attempt() == {"phorge": "Phorge: ConnectionError"}
    assert len(conduit.task_list()) == 1 and AlertTask.objects.get().tried_at is not None
    assert attempt() == {}
    assert len(conduit.task_list()) == 1, "the task the lost answer made was found, not made again"
    row = AlertTask.objects.get()
    assert (row.state, row.task_id) == ("open", 1)
    failing = [r for r in caplog.records if getattr(r, "event", "") == "alert.channel_failing"]
    assert len(failing) == 1, "one outage, logged once, whatever it became meanwhile"


@PHORGE_DB
def test_a_watcher_that_died_after_phorge_made_the_task_leaves_no_second_one(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_hook(phorge, receiver, "orphan")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    dying = Watcher(phorge_config(conduit), delivery)
    monkeypatch.setattr(sending.Channels, "_finish", lambda self, channel, send, result: None)
    dying.tick()  # Phorge makes the task; the watcher dies before it writes anything down
    monkeypatch.undo()
    assert len(conduit.task_list()) == 1 and AlertTask.objects.get().state == "creating"
    Watcher(phorge_config(conduit), delivery).tick()
    assert AlertTask.objects.get().state == "creating", "its claim holds until it expires"
    AlertTask.objects.update(claimed_until=datetime.now(UTC) - timedelta(seconds=1))
    AlertChannel.objects.update(lease_until=None)  # the dead watcher's channel lease, expired too
    Watcher(phorge_config(conduit), delivery).tick()
    row = AlertTask.objects.get()
    assert (row.state, row.task_id) == ("open", 1) and len(conduit.task_list()) == 1


@PHORGE_DB
def test_an_edit_phorge_refuses_by_policy_leaves_the_task_alone(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    hook = failing_hook(phorge, receiver, "locked")
    watcher = Watcher(phorge_config(conduit), dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3))
    watcher.tick()
    conduit.tasks[1].editable = False  # someone gave the task an edit policy without the bot
    _recover(phorge)
    result = watcher.tick()
    assert not result.failed, "refused for this task only: the channel is not failing"
    assert AlertTask.objects.get().state == "closed"
    [refusal] = [r for r in caplog.records if getattr(r, "event", "") == "alert.task_refused"]
    assert getattr(refusal, "alert", "") == f"receiver:{hook}"
    assert conduit.task_list()[0].status == "open"


@PHORGE_DB
def test_channels_and_tasks_are_shown_where_operators_look_and_never_the_token(
    phorge: Phorge,
    receiver: Receiver,
    conduit: ConduitStandin,
    client: Any,
    django_user_model: Any,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hook = failing_hook(phorge, receiver, "shown")
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3, service_token="t0ken")
    apprise_url = f"json://127.0.0.1:{receiver.port}/json/SECRET0/ok"
    config = dataclasses.replace(phorge_config(conduit), apprise_urls=(apprise_url,))
    settings.GORGE_ALERT = config
    Watcher(config, settings.GORGE_WEBHOOK).tick()
    client.force_login(viewer(django_user_model))
    page = client.get("/").content.decode()
    assert f'<td class="gw-alert-task"><a href="{conduit.url}/T1">T1</a></td>' in page
    assert 'data-channel="phorge"' in page and 'data-channel="apprise:json://127.0.0.1#1"' in page
    assert ">json://127.0.0.1</td>" in page and ">Phorge tasks</td>" in page
    health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN="t0ken").content)["data"]
    [alert] = health["alerts"]
    assert alert["key"] == f"receiver:{hook}" and alert["task"] == {"monogram": "T1", "uri": f"{conduit.url}/T1"}
    channels = {channel["channel"]: channel for channel in health["alert_channels"]}
    assert set(channels) == {"phorge", "apprise:json://127.0.0.1#1"}
    assert channels["phorge"]["kind"] == "phorge" and channels["phorge"]["lastSentAt"]
    assert channels["apprise:json://127.0.0.1#1"]["host"] == "json://127.0.0.1"
    scraped = client.get("/metrics").content.decode()
    shown = page + json.dumps(health) + scraped + caplog.text + client.get(f"/hooks/{hook}/").content.decode()
    for secret in (conduit.token, "SECRET0", apprise_url):
        assert secret not in shown


# -- real watcher processes sharing Django's database ----------------------------------------------------


@pytest.fixture
def watchers(workers: Any) -> Any:
    return lambda name, *args, **env: workers(name, *args, kind=WatcherProcess, **env)


@pytest.mark.slow
@PHORGE_DB
def test_two_watcher_processes_make_one_task_per_episode_and_resolve_each_once(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, smtp: Smtp, site: SiteDatabase, watchers: Any
) -> None:
    hooks = [failing_hook(phorge, receiver, f"pair{i}") for i in range(8)]
    env = {
        "DATABASE_URL": site.url,
        "EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}",
        "GORGE_ALERT_EMAIL_TO": "ops@example.com",
        "GORGE_ALERT_PHORGE_TOKEN": conduit.token,
        "GORGE_ALERT_PHORGE_URL": conduit.url,
        "GORGE_ALERT_PHORGE_TAGS": "#ops",
        "GORGE_ALERT_PHORGE_PRIORITY": "unbreak",
        "GORGE_ALERT_SITE_URL": "https://gorge.example.com",
        "GORGE_ALERT_INTERVAL_SEC": "1",
        "GORGE_ALERT_CHANNEL_TIMEOUT_SEC": "3",
        "GORGE_WEBHOOK_ERROR_THRESHOLD": "3",
    }
    pair = [watchers("a", **env).start(), watchers("b", **env).start()]
    wait_for(lambda: len(conduit.task_list()) >= len(hooks), 40, "a task for every hook")
    time.sleep(2)  # many more passes of both
    tasks = conduit.task_list()
    assert len(tasks) == len(hooks), [task.title for task in tasks]
    for hook in hooks:
        assert sum(1 for task in tasks if hook in task.description) == 1, hook
    assert all(task.priority == "unbreak" and task.projects == [conduit.projects["ops"]] for task in tasks)
    _recover(phorge)
    wait_for(lambda: all(task.status == "resolved" for task in conduit.task_list()), 40, "every task resolved")
    time.sleep(2)
    assert all(len(task.comments) == 1 for task in conduit.task_list()), "one comment each: the end"
    assert len(conduit.edits()) == 2 * len(hooks)
    assert len(conduit.task_list()) == len(hooks)
    for process in pair:
        process.stop()
        assert process.proc is not None and process.proc.returncode == 0
        assert conduit.token not in process.log.read_text()
