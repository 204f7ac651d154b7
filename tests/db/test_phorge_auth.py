"""Sign in with Phorge against a hostile Phorge and stale sessions (the second security review, items 2, 6, 7,
8, 9 and 14), through Django's test client and the real stand-in of Phorge's OAuth server and Conduit:
Phorge's answers bounded in time and size, no session row for strangers, logout never by a link, password
sessions ended when only Phorge may sign in, Phorge's address never from its database, user names that
cannot pass for a local account."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.phorge_app_db import AppDatabases
from tests.support.phorge_oauth_standin import PhorgeStandin, PhorgeUser
from tests.support.rawserver import RawServer
from webhook_delivery.phorge_auth import events, phorge, views
from webhook_delivery.phorge_auth.accounts import username_for
from webhook_delivery.phorge_auth.config import PhorgeOAuthConfig, address_problem
from webhook_delivery.phorge_auth.models import PhorgeAccount
from webhook_delivery.phorge_auth.phorge import PhorgeUnknown, phorge_url

pytestmark = PHORGE_DB

SITE = "http://testserver"
CALLBACK = f"{SITE}/auth/phorge/callback/"


@pytest.fixture
def standin(settings: Any) -> Iterator[PhorgeStandin]:
    views.forget_probes()
    with PhorgeStandin(redirect_uri=CALLBACK) as running:
        settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
            client_id=running.client_id, client_secret=running.client_secret, url=running.url, site_url=SITE
        )
        yield running
    views.forget_probes()


def admin(standin: PhorgeStandin, name: str = "alice") -> PhorgeUser:
    user = standin.add_user(name, admin=True)
    standin.logged_in = user.phid
    return user


def sign_in(client: Client, standin: PhorgeStandin, user: PhorgeUser) -> Any:
    """The whole flow: this service's login view, "Phorge" handing out a code, the callback."""
    started = client.get("/auth/phorge/login/")
    assert started.status_code == 302, started.content[:300]
    state = parse_qs(urlsplit(started["Location"]).query)["state"][0]
    code = standin.issue_code(user, CALLBACK)
    return client.get("/auth/phorge/callback/", {"code": code, "state": state})


def signed_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def logged(caplog: pytest.LogCaptureFixture, event: str) -> list[Any]:
    return [record for record in caplog.records if getattr(record, "event", None) == event]


def test_strangers_at_the_login_view_write_no_session_and_ask_phorge_once(standin: PhorgeStandin) -> None:
    for _ in range(20):
        response = Client().get("/auth/phorge/login/")
        assert response.status_code == 302 and response["Location"].startswith(f"{standin.url}/oauthserver/auth/")
        assert "sessionid" not in response.cookies
    assert Session.objects.count() == 0, "no session row for a stranger"
    assert standin.auth_requests == 1, "Phorge asked once, not per visit"


def hanging(sock: socket.socket) -> None:
    sock.recv(65536)
    time.sleep(30)


def test_a_hanging_phorge_holds_a_login_view_once_for_a_few_seconds(settings: Any) -> None:
    views.forget_probes()
    with RawServer(hanging) as server:
        settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
            client_id="PHID-OASC-x", client_secret="y", url=f"http://127.0.0.1:{server.port}"
        )
        times = []
        for _ in range(5):
            started = time.monotonic()
            response = Client().get("/auth/phorge/login/")
            times.append(time.monotonic() - started)
            assert response.status_code == 503
        assert times[0] < views.PROBE_TIMEOUT_SEC + 2
        assert max(times[1:]) < 1, "the next visits are told at once, from the last answer"
    views.forget_probes()


def test_a_link_to_the_callback_never_signs_anyone_out(
    standin: PhorgeStandin, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    sign_in(client, standin, admin(standin))
    assert signed_in(client)
    for query in ("", "?state=forged&code=abc", "?error=access_denied"):
        response = client.get(f"/auth/phorge/callback/{query}")
        assert response.status_code == 400
        assert signed_in(client), f"the callback{query} ended the session"
    assert [getattr(r, "reason", "") for r in logged(caplog, events.REFUSED)] == ["state mismatch"] * 3


@pytest.mark.parametrize(
    ("path", "how"),
    [
        ("/oauthserver/token/", "trickle"),
        ("/oauthserver/token/", "huge"),
        ("/oauthserver/token/", "deep"),
        ("/api/user.whoami", "trickle"),
        ("/api/user.whoami", "huge"),
        ("/api/user.whoami", "deep"),
    ],
)
def test_a_hostile_phorge_answer_costs_a_bounded_wait_and_gives_a_clean_page(
    standin: PhorgeStandin, client: Client, monkeypatch: pytest.MonkeyPatch, path: str, how: str
) -> None:
    monkeypatch.setattr(phorge, "TIMEOUT_SEC", 2)
    import resource

    memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    standin.misbehave[path] = how
    started = time.monotonic()
    response = sign_in(client, standin, admin(standin))
    assert time.monotonic() - started < 6
    assert response.status_code == 503 and b"Phorge cannot be reached" in response.content
    assert not signed_in(client)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - memory) / 1024 < 50, "the answer was kept"


def test_an_infinite_expiry_is_no_500(standin: PhorgeStandin, client: Client) -> None:
    standin.misbehave["/oauthserver/token/"] = "infinite expiry"
    response = sign_in(client, standin, admin(standin))
    assert response.status_code == 302 and signed_in(client)


def test_a_trickling_whoami_ends_a_recheck_within_the_timeout(
    standin: PhorgeStandin, client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    sign_in(client, standin, admin(standin))
    settings.GORGE_PHORGE_OAUTH = dataclasses.replace(settings.GORGE_PHORGE_OAUTH, recheck_sec=1)
    monkeypatch.setattr(phorge, "TIMEOUT_SEC", 2)
    standin.misbehave["/api/user.whoami"] = "trickle"
    PhorgeAccount.objects.update(checked_at=PhorgeAccount.objects.get().checked_at.replace(year=2000))
    started = time.monotonic()
    assert signed_in(client), "kept through the grace, as when Phorge gives no answer"
    assert time.monotonic() - started < 5


def test_only_phorge_sign_in_ends_password_sessions_but_the_break_glass_ones(
    client: Client, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    users = get_user_model()
    other = Client()
    # Password sessions from before GORGE_PHORGE_OAUTH_ONLY was turned on.
    client.force_login(users.objects.create_superuser("root2", password="pw-root2-long-enough"), views.BACKEND)
    other.force_login(users.objects.create_superuser("breakglass", password="pw-breakglass-long"), views.BACKEND)
    assert client.get("/").status_code == 200 and other.get("/").status_code == 200
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id="PHID-OASC-x",
        client_secret="y",
        url="https://phorge.example",
        only=True,
        break_glass_users=("breakglass",),
    )
    ended_page = client.get("/")
    assert (ended_page.status_code, ended_page["Location"]) == (303, "/auth/phorge/ended/"), "ended: to why"
    why = client.get("/auth/phorge/ended/").content.decode()
    assert "Your session has ended" in why and "Only Sign in with Phorge is allowed here now" in why
    assert client.get("/").status_code == 302, "then to the login page, as anyone signed out"
    assert other.get("/").status_code == 200, "the break-glass account keeps its session"
    [ended] = logged(caplog, events.SESSION_ENDED)
    assert getattr(ended, "user", "") == "root2"


def test_phorges_address_never_comes_from_its_database(
    phorge: Phorge, app_databases: AppDatabases, settings: Any, tmp_path: Any
) -> None:
    from webhook_delivery.reads import phorge_status

    app_databases.create(["config"])
    app_databases.config("phabricator.base-uri", json.dumps("https://attacker.example/"))
    phorge_status._phorge_settings.cache_clear()
    phorge_status._masters.cache_clear()
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(client_id="PHID-OASC-x", client_secret="y")
    assert phorge_status.phorge_base_uri() == "https://attacker.example", "the pages may link there"
    with pytest.raises(PhorgeUnknown, match="database is not trusted"):
        phorge_url()
    response = Client().get("/auth/phorge/login/")
    assert response.status_code == 503 and b"attacker" not in response.content

    local = tmp_path / "local.json"
    local.write_text(json.dumps({"phabricator.base-uri": "https://phorge.example.org/"}))
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, phorge_local_config=str(local))
    assert phorge_url() == "https://phorge.example.org", "Phorge's local file is trusted"
    phorge_status._phorge_settings.cache_clear()
    phorge_status._masters.cache_clear()


@pytest.mark.parametrize(
    ("url", "allow", "refused"),
    [
        ("https://phorge.example.org", False, False),
        ("http://phorge.example.org", False, True),
        ("http://phorge.example.org", True, False),
        ("http://127.0.0.1:8080", False, False),
        ("http://[::1]:8080", False, False),
        ("http://localhost", False, False),
        ("ftp://phorge.example.org", True, True),
    ],
)
def test_phorges_address_is_https_unless_loopback_or_allowed(url: str, allow: bool, refused: bool) -> None:
    assert (address_problem(url, allow_http=allow) is not None) is refused


def test_a_plain_http_oauth_url_is_refused_at_start() -> None:
    from tests.support.phorge_oauth_standin import settings_errors

    errors = settings_errors(GORGE_PHORGE_OAUTH_URL="http://phorge.example.org")["errors"]
    assert "GORGE_PHORGE_OAUTH_URL" in errors and "plain http" in errors["GORGE_PHORGE_OAUTH_URL"]
    allowed = settings_errors(GORGE_PHORGE_OAUTH_URL="http://phorge.example.org", GORGE_PHORGE_ALLOW_HTTP="true")
    assert "GORGE_PHORGE_OAUTH_URL" not in allowed["errors"]


@pytest.mark.parametrize(
    ("phorge_name", "becomes"),
    [
        ("alice", "alice"),
        ("ADMIN", "phorge-PHID-USER-x"),  # a local "admin" exists: in any letter case, not its name
        ("ａｄｍｉｎ", "phorge-PHID-USER-x"),  # noqa: RUF001 - fullwidth, NFKC: "admin"
        ("ｂｏｂ", "bob"),  # noqa: RUF001
        ("ev\x1b[31mil", "phorge-PHID-USER-x"),
        ("tab\there", "phorge-PHID-USER-x"),
        ("", "phorge-PHID-USER-x"),
    ],
)
def test_phorge_user_names_are_normalised_and_never_pass_for_a_local_account(phorge_name: str, becomes: str) -> None:
    get_user_model().objects.create_user("admin", password="x")
    assert username_for(phorge_name, "PHID-USER-x", None) == becomes
