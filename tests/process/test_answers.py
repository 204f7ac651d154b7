"""What another server says is shown by one rule (webhook_delivery/answers.py), and checked against what that
server can say before anything of it is kept (issue 39, findings 1 and 2).

A hostile (or broken) Conduit endpoint, chat receiver or OAuth server echoes the secret it was sent in every
field it controls: none of it reaches a log line, a stored error, a page, the health JSON or a metric label.
Conduit answering a task id or PHID Phorge cannot have made is one failure of the channel, logged once and
retried with backoff: no traceback, nothing stored of it, and never a second task for the episode."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from tests.support.alert_channels import alert_config, failing_hook
from tests.support.helpers import PHORGE_DB, Phorge, viewer, worker_env
from tests.support.phorge_conduit_standin import ConduitStandin
from tests.support.processes import SiteDatabase, manage
from tests.support.rawserver import RawServer, read_message
from tests.support.receiver import Receiver
from webhook_delivery import answers
from webhook_delivery.alerts import phorge_tasks
from webhook_delivery.alerts.config import AlertConfig
from webhook_delivery.alerts.models import AlertChannel, AlertTask
from webhook_delivery.alerts.watcher import Watcher
from webhook_delivery.phorge_auth import phorge as phorge_auth
from webhook_delivery.phorge_auth.config import PhorgeOAuthConfig


@pytest.fixture
def conduit() -> Iterator[ConduitStandin]:
    standin = ConduitStandin().start()
    yield standin
    standin.release()
    standin.stop()


def phorge_config(conduit: ConduitStandin, **changes: Any) -> AlertConfig:
    phorge = {"phorge_token": conduit.token, "phorge_url": conduit.url}
    return dataclasses.replace(alert_config(None, None), **{**phorge, **changes})


def everything_shown(client: Any, caplog: pytest.LogCaptureFixture, hook: str) -> str:
    """Every place an operator (or Prometheus) reads: the log, the stored channel errors, the dashboard, the
    hook page, the health JSON, the web metrics and the watcher's (`client` logged in)."""
    health = client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN="t0ken")
    assert health.status_code == 200
    return "\n".join(
        [
            caplog.text,
            *(f"{record.__dict__}" for record in caplog.records),
            *(row.last_error for row in AlertChannel.objects.all()),
            client.get("/").content.decode(),
            client.get(f"/hooks/{hook}/").content.decode(),
            health.content.decode(),
            client.get("/metrics").content.decode(),
            generate_latest(REGISTRY).decode(),
        ]
    )


# -- finding 1: no secret shown, whatever the server answers ---------------------------------------------------


def test_only_codes_of_a_known_shape_are_shown_anything_else_by_its_kind() -> None:
    token = "api-" + "a" * 28
    assert answers.conduit_code("ERR-INVALID-AUTH", secrets=(token,)) == "ERR-INVALID-AUTH"
    assert answers.conduit_code("ERR_BAD_TASK") == "ERR_BAD_TASK"
    for hostile in (token, f"ERR-{token}", f"ERR-X {token}", "ERR-" + "A" * 80, "err-invalid-auth", "ERR-"):
        assert answers.conduit_code(hostile, secrets=(token,)) == (
            f"an error code not known to Conduit (text of {len(hostile)} characters)"
        )
    assert answers.conduit_code(["ERR-X"]) == "an error code not known to Conduit (a list of 1 item)"
    assert answers.conduit_code(7) == "an error code not known to Conduit (a number)"
    assert answers.conduit_label("ERR-INVALID-AUTH") == "ERR-INVALID-AUTH"
    assert answers.conduit_label("ERR-MADE-UP") == "other", "a server makes no new time series"
    secret = "abcdefghijklmnopqrstuvwxyzabcdef"  # an OAuth client secret can be all letters
    assert answers.oauth_code("invalid_grant", secrets=(secret,)) == "invalid_grant"
    assert answers.oauth_code(secret, secrets=(secret,)) == "an error code not known to OAuth (text of 32 characters)"
    assert answers.oauth_code("made_up_error") == "an error code not known to OAuth (text of 13 characters)"


def _forgeries(token: str) -> list[dict[str, Any]]:
    """Conduit answers of every shape, the token planted in every field of each."""
    return [
        {"result": None, "error_code": token, "error_info": token},
        {"result": None, "error_code": f"ERR-INVALID-AUTH {token}", "error_info": f'API token "{token}"'},
        {"result": None, "error_code": {"code": token}, "error_info": [token]},
        {"result": {"object": {"id": token, "phid": token}, "transactions": [token]}, "error_code": None},
        {"result": {"object": {"id": 1, "phid": f"PHID-TASK-{token}"}}, "error_code": None, "error_info": token},
        {"result": token, "error_code": "", "error_info": token},
    ]


@PHORGE_DB
def test_a_conduit_endpoint_that_echoes_the_token_everywhere_never_gets_it_shown(
    phorge: Phorge,
    receiver: Receiver,
    conduit: ConduitStandin,
    client: Any,
    django_user_model: Any,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = failing_hook(phorge, receiver, "echoed")
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3, service_token="t0ken")
    settings.GORGE_ALERT = phorge_config(conduit)
    watcher = Watcher(settings.GORGE_ALERT, settings.GORGE_WEBHOOK)
    client.force_login(viewer(django_user_model))
    for forged in _forgeries(conduit.token):
        conduit.forge = lambda method, answer, forged=forged: forged  # type: ignore[misc]
        AlertChannel.objects.update(retry_at=None, failing_since=None)  # each told as a new outage
        result = watcher.tick()
        assert set(result.failed) == {"phorge"}, forged
        shown = everything_shown(client, caplog, hook)
        assert conduit.token not in shown, f"the token shown after {forged}"
        assert conduit.token.upper() not in shown
    errors = [r for r in caplog.records if getattr(r, "event", "") == "alert.channel_failing"]
    assert len(errors) == len(_forgeries(conduit.token)), "each told, by what it was"
    assert getattr(errors[0], "error", "") == ("Conduit an error code not known to Conduit (text of 32 characters)")


def _echo(secret: str) -> Callable[[socket.socket], None]:
    """An HTTP server that answers with `secret` in its status line, a header, a redirect and its body."""

    def answer(sock: socket.socket) -> None:
        if read_message(sock) is None:
            return
        body = json.dumps({"error": secret, "message": secret, "ok": False}).encode()
        sock.sendall(
            f"HTTP/1.1 500 {secret}\r\nX-Echo: {secret}\r\nLocation: http://127.0.0.1:9/{secret}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return answer


@PHORGE_DB
def test_chat_and_apprise_receivers_that_echo_their_url_secrets_never_get_them_shown(
    phorge: Phorge,
    receiver: Receiver,
    client: Any,
    django_user_model: Any,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = failing_hook(phorge, receiver, "echoing-chat")
    secrets = {"chat": "chatSECRET0path", "json": "jsonSECRET1path", "mmost": "mmostSECRET2token"}
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3, service_token="t0ken")
    with (
        RawServer(_echo(secrets["chat"])) as chat,
        RawServer(_echo(secrets["json"])) as json_server,
        RawServer(_echo(secrets["mmost"])) as mmost,
    ):
        settings.GORGE_ALERT = dataclasses.replace(
            alert_config(None, None),
            chat_url=f"http://127.0.0.1:{chat.port}/hooks/{secrets['chat']}",
            apprise_urls=(
                f"json://127.0.0.1:{json_server.port}/{secrets['json']}",
                f"mmost://127.0.0.1:{mmost.port}/{secrets['mmost']}",
            ),
        )
        result = Watcher(settings.GORGE_ALERT, settings.GORGE_WEBHOOK).tick()
        client.force_login(viewer(django_user_model))
        assert result.failed == {
            "chat": "HTTP 500",
            "apprise:json://127.0.0.1#1": "HTTP 500",
            "apprise:mmost://127.0.0.1#2": "HTTP 500",
        }
        shown = everything_shown(client, caplog, hook)
    for secret in secrets.values():
        assert secret not in shown


def _oauth_echo(secret: str, token_field: str) -> Callable[[socket.socket], None]:
    def answer(sock: socket.socket) -> None:
        if read_message(sock) is None:
            return
        body = json.dumps({token_field: secret, "error_description": secret, "result": None}).encode()
        sock.sendall(
            f"HTTP/1.1 400 {secret}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return answer


def test_phorge_oauth_and_whoami_answers_that_echo_the_secrets_name_only_their_kind() -> None:
    client_secret = "qwertyuiopasdfghjklzxcvbnmqwerty"  # of Phorge's form, all letters
    code = "zyxwvutsrqponmlkjihgfedcbazyxwvu"
    with RawServer(_oauth_echo(client_secret, "error")) as server:
        conf = PhorgeOAuthConfig(
            url=f"http://127.0.0.1:{server.port}", client_id="PHID-OASC-x", client_secret=client_secret
        )
        with pytest.raises(phorge_auth.TokenRefused) as refused:
            phorge_auth.exchange_code(conf, code, "http://127.0.0.1/redirect")
    assert refused.value.code == "an error code not known to OAuth (text of 32 characters)"
    token = "api-" + "k" * 28
    with RawServer(_conduit_200(token)) as server:
        conf = PhorgeOAuthConfig(url=f"http://127.0.0.1:{server.port}", client_id="x", client_secret="y")
        who = phorge_auth.whoami(token, conf)
    assert who.verdict is phorge_auth.Verdict.REFUSED
    assert who.reason == "an error code not known to Conduit (text of 32 characters)"


def _conduit_200(token: str) -> Callable[[socket.socket], None]:
    def answer(sock: socket.socket) -> None:
        if read_message(sock) is None:
            return
        body = json.dumps({"result": None, "error_code": token, "error_info": token}).encode()
        sock.sendall(
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )

    return answer


# -- finding 2: answers outside Phorge's domains ----------------------------------------------------------------


def _made(task_id: object, phid: object = None) -> Callable[[str, dict[str, Any]], dict[str, Any] | None]:
    """maniphest.edit creates the task in Phorge, then answers with this id and PHID (None: the task's own)
    instead of its own."""

    def forge(method: str, answer: dict[str, Any]) -> dict[str, Any] | None:
        if method != "maniphest.edit" or not answer.get("result"):
            return None
        made = answer["result"]["object"]
        return {**answer, "result": {**answer["result"], "object": {"id": task_id, "phid": phid or made["phid"]}}}

    return forge


OUT_OF_RANGE = [
    (2**32, None),  # maniphest_task.id is `int unsigned`
    (2**63, None),
    (2**70, None),
    (0, None),
    (-1, None),
    (True, None),
    ("7", None),
    (1.5, None),
    (1, "PHID-TASK-" + "x" * 60),
    (1, "PHID-USER-abcdefghijklmnopqrst"),
    (1, "PHID-TASK-abc def"),
]


@PHORGE_DB
@pytest.mark.parametrize(("task_id", "phid"), OUT_OF_RANGE, ids=[repr(case)[:40] for case in OUT_OF_RANGE])
def test_a_task_id_or_phid_phorge_cannot_have_made_is_one_failure_and_never_a_second_task(
    phorge: Phorge,
    receiver: Receiver,
    conduit: ConduitStandin,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
    task_id: object,
    phid: object,
) -> None:
    failing_hook(phorge, receiver, "out-of-range")
    watcher = Watcher(phorge_config(conduit), dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3))
    conduit.forge = _made(task_id, phid)
    result = watcher.tick()
    assert result.failed == {"phorge": phorge_tasks.OUT_OF_DOMAIN}
    row = AlertTask.objects.get()
    assert (row.state, row.task_id, row.task_phid) == ("creating", None, "")
    assert row.tried_at is not None, "Phorge may have made it: the next try looks for it first"
    assert AlertChannel.objects.get(name="phorge").retry_at is not None, "retried with backoff"
    AlertChannel.objects.update(retry_at=None)
    second = watcher.tick()  # the stand-in's search answers are Phorge's own: the task made is found
    assert not second.failed, second.failed
    [task] = conduit.task_list()
    row = AlertTask.objects.get()
    assert (row.state, row.task_id, row.task_phid) == ("open", task.id, task.phid)
    assert len([call for call in conduit.edits() if "objectIdentifier" not in call.params]) == 1
    failing = [r for r in caplog.records if getattr(r, "event", "") == "alert.channel_failing"]
    assert len(failing) == 1


@PHORGE_DB
def test_a_search_that_answers_out_of_range_too_makes_no_second_task(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, settings: Any
) -> None:
    failing_hook(phorge, receiver, "consistently-hostile")
    watcher = Watcher(phorge_config(conduit), dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3))

    def hostile(method: str, answer: dict[str, Any]) -> dict[str, Any] | None:
        result = answer.get("result")
        if method == "maniphest.edit" and result:
            return {**answer, "result": {**result, "object": {"id": 2**32, "phid": result["object"]["phid"]}}}
        if method == "maniphest.search" and result:
            return {**answer, "result": {**result, "data": [{**item, "id": 2**32} for item in result["data"]]}}
        if method == "user.whoami" and result:
            return {**answer, "result": {**result, "phid": "not-a-phid"}} if hostile.whoami else None
        return None

    hostile.whoami = False  # type: ignore[attr-defined]
    conduit.forge = hostile
    for round_ in range(4):
        hostile.whoami = round_ == 2  # type: ignore[attr-defined]
        AlertChannel.objects.update(retry_at=None)
        assert watcher.tick().failed == {"phorge": phorge_tasks.OUT_OF_DOMAIN}
        assert len(conduit.task_list()) == 1, "the task made is not made again"
    conduit.forge = None
    AlertChannel.objects.update(retry_at=None)
    assert not watcher.tick().failed
    assert AlertTask.objects.get().state == "open" and len(conduit.task_list()) == 1


@pytest.mark.slow
@PHORGE_DB
def test_watch_once_with_an_out_of_range_task_id_exits_0_with_no_traceback_and_makes_one_task(
    phorge: Phorge, receiver: Receiver, conduit: ConduitStandin, site: SiteDatabase
) -> None:
    failing_hook(phorge, receiver, "cron-run")
    conduit.forge = _made(2**32)
    env = worker_env(
        DATABASE_URL=site.url,
        GORGE_ALERT_PHORGE_TOKEN=conduit.token,
        GORGE_ALERT_PHORGE_URL=conduit.url,
        GORGE_WEBHOOK_ERROR_THRESHOLD="3",
    )
    first = manage("watch_webhooks", "--once", env=env, ok=False)
    output = first.stdout + first.stderr
    assert first.returncode == 0, output
    assert "Traceback" not in output and "DataError" not in output
    assert "failed channels phorge" in first.stdout
    site.sql("UPDATE delivery_alerts_alertchannel SET retry_at = NULL")
    second = manage("watch_webhooks", "--once", env=env, ok=False)
    assert second.returncode == 0 and "failed channels none" in second.stdout, second.stdout + second.stderr
    assert len(conduit.task_list()) == 1
    assert site.sql("SELECT state, task_id FROM delivery_alerts_alerttask") == [("open", 1)]
