"""Sign in with Phorge, end to end in headless Chromium against a local stand-in for Phorge's OAuth server
and Conduit (tests/support/phorge_oauth_standin.py): who gets in, who is refused, forged and replayed answers,
re-checks while signed in, the break-glass account while Phorge is down, and no secret in a log or a page.
Also: Phorge's consent and "Continue to Application" dialogs (trusted and untrusted clients), the OAuth
Server as the prototype application it is in Phorge, every log line's event key and the Phorge user it
names (hostile names included), the login page's layout, and the set-up steps of docs/operate/sign-in.md."""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session

from tests.support import ROOT
from tests.support import phorge_oauth_standin as phorge_words
from tests.support.helpers import PHORGE_DB, Phorge, viewer
from tests.support.phorge_oauth_standin import PhorgeStandin, PhorgeUser, settings_errors
from webhook_delivery.logformat import JsonFormatter, TextFormatter
from webhook_delivery.phorge_auth import events
from webhook_delivery.phorge_auth.config import PhorgeOAuthConfig
from webhook_delivery.phorge_auth.models import PhorgeAccount
from webhook_delivery.phorge_auth.views import forget_probes
from webhook_delivery.web.access import OPERATE_PERMISSION, VIEW_PERMISSION

pytestmark = [PHORGE_DB, pytest.mark.browser]

CALLBACK = "/auth/phorge/callback/"


@pytest.fixture
def browser(chromium: Any) -> Any:
    return chromium  # Debian's chromium, launched once per test as in the dashboard test


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log line, at DEBUG, from every logger (the HTTP client's included)."""
    caplog.set_level(logging.DEBUG)
    for name in ("urllib3", "django", "django.request", "webhook_delivery"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


@pytest.fixture
def standin(live_server: Any, settings: Any) -> Iterator[PhorgeStandin]:
    with PhorgeStandin(redirect_uri=f"{live_server.url}{CALLBACK}") as running:
        settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
            client_id=running.client_id, client_secret=running.client_secret, url=running.url, recheck_sec=300
        )
        yield running
    forget_probes()


class Seen:
    """Every page the browser was shown (its HTML after each navigation), to prove no secret reached one,
    and the status of each response from this service."""

    def __init__(self, browser: Any, base: str) -> None:
        self.base = base
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.pages: list[str] = []
        self.statuses: dict[str, int] = {}
        self.page.on("response", self._response)

    def _response(self, response: Any) -> None:
        if response.url.startswith(self.base):
            self.statuses[urlsplit(response.url).path] = response.status

    def goto(self, path: str) -> None:
        self.page.goto(self.base + path)
        self.pages.append(self.page.content())

    def signed_in(self) -> bool:
        self.page.goto(self.base + "/")
        self.pages.append(self.page.content())
        return "/admin/login/" not in self.page.url and self.page.locator("#count-queued").count() == 1

    def sign_in_with_phorge(self, *, expect: str = "/") -> None:
        self.goto("/")
        assert "/admin/login/" in self.page.url
        assert self.page.locator("#phorge-signin").inner_text() == "Sign in with Phorge"
        self.page.click("#phorge-signin")
        self.page.wait_for_url(lambda url: urlsplit(url).path == expect)
        self.pages.append(self.page.content())

    def answer_phorge_with(self, standin: PhorgeStandin, code: str, *, state: str | None = None) -> None:
        """Start a sign-in here, but have "Phorge" send back the given code (and the true or a given state)."""
        standin.forged_reply = {"code": code} if state is None else {"code": code, "state": state}
        self.goto("/auth/phorge/login/")

    def close(self) -> None:
        self.context.close()


def assert_no_secret_anywhere(standin: PhorgeStandin, logs: pytest.LogCaptureFixture, *seen: Seen) -> None:
    text = logs.text + "".join(str(record.args) for record in logs.records)
    pages = "".join(page for one in seen for page in one.pages)
    assert pages, "no page was recorded"
    secrets = standin.secrets()
    assert secrets and standin.client_secret in secrets
    for secret in secrets:
        assert secret not in text, "a code, token or the client secret reached a log line"
        assert secret not in pages, "a code, token or the client secret reached a page"
    for account in PhorgeAccount.objects.all():
        assert not any(secret in account.token_encrypted for secret in secrets), "a token is stored in clear"
    assert "Traceback" not in pages
    ours = [record for record in logs.records if record.name.startswith("webhook_delivery.phorge_auth")]
    for record in ours:
        assert getattr(record, "event", None) in events.ALL, f"a sign-in log line without an event key: {record.msg}"


def logged(logs: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    """The log lines with this event key."""
    return [record for record in logs.records if getattr(record, "event", None) == event]


def assert_names(record: logging.LogRecord, user: str, phid: str | None) -> None:
    """The line names the user (and the PHID) in its fields, and both log formats write them out."""
    event = getattr(record, "event", None)
    assert getattr(record, "user", None) == user
    assert getattr(record, "phid", None) == phid
    text = TextFormatter().format(record)
    assert f" event={event}" in text
    assert f" user={user}" in text or f" user={json.dumps(user)}" in text  # quoted when it has spaces
    entry = json.loads(JsonFormatter().format(record))
    assert entry["event"] == event and entry["user"] == user
    if phid is not None:
        assert f" phid={phid}" in text and entry["phid"] == phid


def admin_user(standin: PhorgeStandin, name: str = "alice") -> PhorgeUser:
    user = standin.add_user(name, admin=True)
    standin.logged_in = user.phid
    return user


def test_administrator_signs_in_and_sees_the_dashboard(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any
) -> None:
    alice = admin_user(standin)
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge()
    assert seen.page.locator("#count-queued").count() == 1
    assert seen.page.locator("#login-form").count() == 0

    user = get_user_model().objects.get(phorge_account__phid=alice.phid)
    assert user.username == "alice" and user.is_staff and not user.is_superuser and user.is_active
    assert user.has_perm(VIEW_PERMISSION) and user.has_perm("webhook_delivery.view_heraldwebhook")
    assert user.has_perm(OPERATE_PERMISSION), "a Phorge administrator may hold, release and requeue (issue 40)"
    assert not user.has_usable_password()
    assert standin.token_requests == 1 and standin.whoami_requests == 1
    seen.goto("/admin/webhook_delivery/heraldwebhookrequest/")
    assert seen.statuses["/admin/webhook_delivery/heraldwebhookrequest/"] == 200
    (signed_in,) = logged(logs, events.SIGNED_IN)
    assert_names(signed_in, "alice", alice.phid)

    # Renamed in Phorge: the same Django user (keyed by PHID), with the new name.
    seen.context.clear_cookies()
    alice.user_name = "alice2"
    seen.sign_in_with_phorge()
    assert get_user_model().objects.get(phorge_account__phid=alice.phid).username == "alice2"
    assert PhorgeAccount.objects.count() == 1
    assert_names(logged(logs, events.SIGNED_IN)[-1], "alice2", alice.phid)
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


@pytest.mark.parametrize("kind", ["member", "disabled admin"])
def test_non_administrator_and_disabled_user_are_refused(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, kind: str
) -> None:
    user = standin.add_user("bob", admin=kind != "member", disabled=kind != "member")
    standin.logged_in = user.phid
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge(expect=CALLBACK)
    assert seen.statuses[CALLBACK] == 403
    assert "You must be a Phorge administrator" in seen.page.inner_text("#phorge-auth-message")
    assert not seen.signed_in()
    assert not [s for s in Session.objects.all() if s.get_decoded().get("_auth_user_id")]
    assert not get_user_model().objects.exists()
    assert not PhorgeAccount.objects.exists()
    (refused,) = logged(logs, events.REFUSED)
    if kind == "member":
        assert_names(refused, "bob", user.phid)
        assert getattr(refused, "reason", None) == "not a Phorge administrator"
    else:  # Conduit refuses a disabled user's token (ERR-INVALID-AUTH) without saying who it is
        assert getattr(refused, "reason", None) == "ERR-INVALID-AUTH"
        assert not hasattr(refused, "user") and not hasattr(refused, "phid")
    assert not logged(logs, events.SIGNED_IN)
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def test_forged_state_reused_code_and_wrong_redirect_uri_fail_cleanly(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any
) -> None:
    alice = admin_user(standin)
    seen = Seen(browser, live_server.url)
    registered = f"{live_server.url}{CALLBACK}"

    # A forged state: refused before the code is spent (Phorge is not even asked).
    code = standin.issue_code(alice, registered)
    seen.answer_phorge_with(standin, code, state="forged-state-value")
    assert seen.statuses[CALLBACK] == 400
    assert seen.page.inner_text("#phorge-auth-title") == "This sign-in was not started here"
    assert standin.token_requests == 0 and code in standin.codes
    assert [getattr(r, "reason", None) for r in logged(logs, events.REFUSED)] == ["state mismatch"]
    assert not seen.signed_in()
    # The callback with no sign-in started at all, and one replayed after it was used: the same.
    seen.goto(f"{CALLBACK}?code={code}&state=whatever")
    assert seen.statuses[CALLBACK] == 400 and standin.token_requests == 0

    # A code used once cannot be used again, even with a good state.
    callbacks: list[str] = []
    seen.page.on("request", lambda r: callbacks.append(r.url) if CALLBACK in r.url else None)
    seen.sign_in_with_phorge()
    used = parse_qs(urlsplit(callbacks[-1]).query)["code"][0]
    seen.context.clear_cookies()
    seen.goto(callbacks[-1].removeprefix(live_server.url))  # the same answer again: its state is gone
    assert seen.statuses[CALLBACK] == 400 and not seen.signed_in()
    before = standin.token_requests
    seen.answer_phorge_with(standin, used)
    assert standin.token_requests == before + 1
    assert seen.statuses[CALLBACK] == 400
    assert seen.page.inner_text("#phorge-auth-title") == "Phorge refused the sign-in"
    assert "invalid_grant" in seen.page.inner_text("#phorge-auth-message")
    assert getattr(logged(logs, events.REFUSED)[-1], "reason", None) == "OAuth error invalid_grant"
    assert not seen.signed_in()

    # A code issued for another redirect URI: Phorge's token endpoint refuses the one this service sends.
    elsewhere = standin.issue_code(alice, f"{live_server.url}/auth/phorge/elsewhere/")
    seen.answer_phorge_with(standin, elsewhere)
    assert seen.statuses[CALLBACK] == 400 and "invalid_grant" in seen.page.inner_text("#phorge-auth-message")
    assert elsewhere in standin.codes  # Phorge keeps a code it refused for a redirect mismatch
    assert not seen.signed_in()

    # Phorge sent the browser back with an error (the user declined): a clean page too.
    standin.forged_reply = {"error": "access_denied", "error_description": "The user declined."}
    seen.goto("/auth/phorge/login/")
    assert seen.statuses[CALLBACK] == 400 and "access_denied" in seen.page.inner_text("#phorge-auth-message")
    assert not seen.signed_in()
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


@pytest.mark.parametrize("change", ["demoted", "disabled", "token revoked"])
def test_signed_in_administrator_loses_access_within_the_recheck_interval(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any, change: str
) -> None:
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id, client_secret=standin.client_secret, url=standin.url, recheck_sec=1
    )
    alice = admin_user(standin)
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge()
    assert standin.whoami_requests == 1  # the sign-in's own question
    time.sleep(1.1)
    assert seen.signed_in()  # re-checked: still an administrator
    assert standin.whoami_requests >= 2

    if change == "demoted":
        alice.admin = False
    elif change == "disabled":
        alice.disabled = True
    else:
        standin.tokens.clear()
    time.sleep(1.1)
    assert not seen.signed_in()
    assert urlsplit(seen.page.url).path == "/auth/phorge/ended/", "a page that says why"
    assert "Phorge no longer lets you in here" in seen.page.inner_text("#phorge-auth-message")
    seen.page.click("#phorge-auth-back")
    assert "/admin/login/" in seen.page.url and "Signed out: Phorge no longer lets you in here" in (
        seen.page.inner_text("body")
    )
    user = get_user_model().objects.get(phorge_account__phid=alice.phid)
    assert not user.is_staff and not user.has_perm(VIEW_PERMISSION) and not user.has_perm(OPERATE_PERMISSION)
    assert PhorgeAccount.objects.get(phid=alice.phid).token_encrypted == ""
    (demoted,) = logged(logs, events.DEMOTED)
    assert_names(demoted, "alice", alice.phid)  # named even when Phorge only answers an error code
    reasons = {
        "demoted": "not a Phorge administrator",
        "disabled": "ERR-INVALID-AUTH",
        "token revoked": "ERR-INVALID-AUTH",
    }
    assert getattr(demoted, "reason", None) == reasons[change]
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def test_unreachable_phorge_keeps_the_session_for_a_bounded_grace_and_logs_it_once(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any
) -> None:
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id, client_secret=standin.client_secret, url=standin.url, recheck_sec=2
    )
    alice = admin_user(standin)
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge()
    standin.outage = True
    time.sleep(2.1)
    assert seen.signed_in()  # first failed re-check: kept
    time.sleep(2.1)
    assert seen.signed_in()  # second: kept
    warnings = logged(logs, events.PHORGE_UNREACHABLE)
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert_names(warnings[0], "alice", alice.phid)
    assert getattr(warnings[0], "reason", None) == "HTTP 502"
    assert not logged(logs, events.SESSION_ENDED)
    time.sleep(2.1)
    assert not seen.signed_in()  # third: the session ends
    assert len(logged(logs, events.PHORGE_UNREACHABLE)) == 1
    (ended,) = logged(logs, events.SESSION_ENDED)
    assert_names(ended, "alice", alice.phid)
    assert getattr(ended, "reason", None) == "no answer to 3 re-checks"
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def test_break_glass_local_account_signs_in_while_phorge_is_down(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any
) -> None:
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id,
        client_secret=standin.client_secret,
        url=standin.url,
        only=True,
        break_glass_users=("breakglass",),
    )
    user_model = get_user_model()
    user_model.objects.create_superuser("breakglass", password="pw-break-glass-1")
    viewer(user_model)  # "operator": staff with the view permission, but not a break-glass account
    standin.stop()

    seen = Seen(browser, live_server.url)
    seen.goto("/")
    assert "/admin/login/" in seen.page.url
    assert seen.page.locator("#phorge-signin").is_visible()
    assert not seen.page.locator("#login-form").is_visible()  # folded away under "Local break-glass account"

    seen.page.click("#phorge-signin")  # Phorge is down: a clear page, no session
    seen.page.wait_for_url(lambda url: urlsplit(url).path == "/auth/phorge/login/")
    assert seen.statuses["/auth/phorge/login/"] == 503
    assert "Phorge cannot be reached" in seen.page.inner_text("#phorge-auth-title")
    assert [getattr(r, "reason", None) for r in logged(logs, events.PHORGE_UNREACHABLE)] == ["no answer"]

    def password_login(name: str, password: str) -> None:
        seen.goto("/admin/login/?next=/")
        seen.page.click("#break-glass summary")
        seen.page.fill("#id_username", name)
        seen.page.fill("#id_password", password)
        with seen.page.expect_navigation():
            seen.page.click("#login-form input[type=submit]")
        seen.pages.append(seen.page.content())

    password_login("operator", "pw-operator-1")  # the right password, but only Phorge may sign it in
    assert "/admin/login/" in seen.page.url and seen.page.locator(".errornote").count() >= 1
    assert not seen.signed_in()
    password_login("breakglass", "pw-break-glass-1")
    seen.page.wait_for_url(f"{live_server.url}/")
    assert seen.signed_in()
    (refused,) = logged(logs, events.LOCAL_LOGIN_REFUSED)
    assert_names(refused, "operator", None)  # a local account: no PHID
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def test_settings_are_read_and_checked_like_the_rest() -> None:
    good = settings_errors(
        GORGE_PHORGE_OAUTH_CLIENT_ID="PHID-OASC-abc",
        GORGE_PHORGE_OAUTH_CLIENT_SECRET="s3cret-value-xyz",
        GORGE_PHORGE_OAUTH_ONLY="true",
        GORGE_BREAK_GLASS_USERS=" breakglass, second ",
        GORGE_ALERT_SITE_URL="https://webhooks.example.org/",
    )
    assert good["errors"] == {}
    assert good["only"] is True and good["users"] == ["breakglass", "second"] and good["recheck"] == 300
    assert good["site"] == "https://webhooks.example.org"
    assert "s3cret-value-xyz" not in good["oauth"]  # the secret stays out of repr (tracebacks, debug pages)

    bad = settings_errors(
        GORGE_PHORGE_OAUTH_CLIENT_ID="42",
        GORGE_PHORGE_OAUTH_RECHECK_SEC="0",
        GORGE_PHORGE_OAUTH_URL="phorge.example.org",
        GORGE_PHORGE_OAUTH_ONLY="maybe",
    )
    assert set(bad["errors"]) >= {
        "GORGE_PHORGE_OAUTH_CLIENT_ID",
        "GORGE_PHORGE_OAUTH_CLIENT_SECRET",
        "GORGE_PHORGE_OAUTH_RECHECK_SEC",
        "GORGE_PHORGE_OAUTH_URL",
        "GORGE_PHORGE_OAUTH_ONLY",
    }
    assert settings_errors(GORGE_PHORGE_OAUTH_ONLY="true")["errors"].keys() == {"GORGE_PHORGE_OAUTH_ONLY"}


def test_phorge_address_defaults_to_phorges_base_uri(phorge: Phorge, settings: Any) -> None:
    import dataclasses

    from webhook_delivery.phorge_auth.phorge import endpoints, phorge_url

    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, phorge_base_uri="https://phorge.example.org")
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(client_id="PHID-OASC-x", client_secret="y")
    assert phorge_url() == "https://phorge.example.org"
    app = endpoints()
    assert app.authorize_url == "https://phorge.example.org/oauthserver/auth/"
    assert app.access_token_url == "https://phorge.example.org/oauthserver/token/"
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id="PHID-OASC-x", client_secret="y", url="https://phorge.internal"
    )
    assert phorge_url() == "https://phorge.internal"


def test_phorge_answers_again_and_a_session_ended_here_are_logged_with_the_user(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any
) -> None:
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id, client_secret=standin.client_secret, url=standin.url, recheck_sec=1
    )
    alice = admin_user(standin)
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge()
    standin.outage = True
    time.sleep(1.1)
    assert seen.signed_in()  # one failed re-check: kept
    assert_names(logged(logs, events.PHORGE_UNREACHABLE)[0], "alice", alice.phid)
    standin.outage = False
    alice.user_name = "alice-renamed"  # renamed in Phorge meanwhile: the log lines follow Phorge's name
    time.sleep(1.1)
    assert seen.signed_in()
    (answers,) = logged(logs, events.PHORGE_ANSWERS)
    assert_names(answers, "alice-renamed", alice.phid)
    assert PhorgeAccount.objects.get(phid=alice.phid).user_name == "alice-renamed"

    # Someone takes staff away from the Django account here: the session ends at its next request.
    get_user_model().objects.filter(phorge_account__phid=alice.phid).update(is_staff=False)
    assert not seen.signed_in()
    (ended,) = logged(logs, events.SESSION_ENDED)
    assert_names(ended, "alice-renamed", alice.phid)
    assert "not staff" in ended.getMessage()
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


HOSTILE_NAME = (
    "mallory\n2031-01-01 00:00:00,000 INFO webhook_delivery.phorge_auth Phorge administrator signed in "
    "event=auth.signed_in user=root\r\x1b[2K\x07\x85\u2028\u202eevil\x7f"
)
RAW_BREAKS = ("\n", "\r", "\x1b", "\x07", "\x85", "\u2028", "\u202e", "\x7f")


def test_a_hostile_phorge_user_name_cannot_forge_a_log_line(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any
) -> None:
    """Phorge's answer is untrusted text: a user name with line breaks, terminal escapes and a bidi
    override is escaped before either log format writes it, and stays one line, in its field."""
    from webhook_delivery.terminal import printable

    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id, client_secret=standin.client_secret, url=standin.url, recheck_sec=1
    )
    mallory = admin_user(standin, HOSTILE_NAME)
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge()
    mallory.admin = False
    time.sleep(1.1)
    assert not seen.signed_in()
    lines = [*logged(logs, events.SIGNED_IN), *logged(logs, events.DEMOTED)]
    assert len(lines) == 2
    for record in lines:
        assert_names(record, printable(HOSTILE_NAME), mallory.phid)
        for formatted in (TextFormatter().format(record), JsonFormatter().format(record)):
            assert len(formatted.splitlines()) == 1  # str.splitlines breaks at \x85 and \u2028 as well
            assert not any(char in formatted for char in RAW_BREAKS)
            assert "mallory\\n2031-01-01" in formatted.replace("\\\\", "\\")
        # The forged "event=... user=root" stays inside the quoted user field.
        assert f" user={json.dumps(printable(HOSTILE_NAME))}" in TextFormatter().format(record)
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def _http(url: str, data: dict[str, str] | None = None) -> tuple[int, str]:
    body = None if data is None else urlencode(data).encode()
    try:
        with urllib.request.urlopen(url, data=body, timeout=10) as response:  # noqa: S310 - the local stand-in
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_standin_routes_the_oauth_server_only_when_installed_like_phorge(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin
) -> None:
    """PhabricatorOAuthServerApplication::isPrototype: Phorge routes no /oauthserver/ page (the auth and
    token endpoints included) while phabricator.show-prototypes is off or the application is uninstalled,
    while Conduit's user.whoami keeps answering a token issued before (Conduit does not ask)."""
    alice = admin_user(standin)
    assert standin.show_prototypes  # the default the sign-in tests run with
    status, page = _http(f"{standin.url}/oauthserver/")
    assert status == 200 and phorge_words.CREATE_BUTTON in page
    status, page = _http(f"{standin.url}/oauthserver/client/view/{standin.client_numeric_id}/")
    assert status == 200 and phorge_words.SHOW_SECRET in page and standin.client_id in page
    code = standin.issue_code(alice, standin.redirect_uri)
    exchange = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": standin.redirect_uri,
        "client_id": standin.client_id,
        "client_secret": standin.client_secret,
    }
    status, answer = _http(f"{standin.url}/oauthserver/token/", exchange)
    assert status == 200
    token = json.loads(answer)["access_token"]

    for off in ("prototypes off", "uninstalled"):
        standin.show_prototypes, standin.uninstalled = off == "uninstalled", off == "uninstalled"
        auth = f"{standin.url}/oauthserver/auth/?client_id={standin.client_id}&response_type=code&state=x"
        for url, data in (
            (f"{standin.url}/oauthserver/", None),
            (auth, None),
            (
                f"{standin.url}/oauthserver/token/",
                {**exchange, "code": standin.issue_code(alice, standin.redirect_uri)},
            ),
            (f"{standin.url}/oauthserver/client/view/{standin.client_numeric_id}/", None),
        ):
            status, page = _http(url, data)
            assert status == 404 and phorge_words.NOT_FOUND_TITLE in page, (off, url)
        status, answer = _http(f"{standin.url}/api/user.whoami", {"access_token": token})
        assert status == 200 and json.loads(answer)["result"]["phid"] == alice.phid, off

    standin.show_prototypes, standin.uninstalled = True, False
    status, page = _http(f"{standin.url}/oauthserver/")
    assert status == 200 and phorge_words.CREATE_BUTTON in page


def test_sign_in_while_phorges_oauth_server_is_not_installed(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any
) -> None:
    """As in Phorge with phabricator.show-prototypes off: a new sign-in gets a page that says what to
    enable (Phorge itself would show its 404), while a session signed in before keeps being re-checked."""
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id, client_secret=standin.client_secret, url=standin.url, recheck_sec=1
    )
    admin_user(standin)
    standin.show_prototypes = False
    seen = Seen(browser, live_server.url)
    seen.goto("/")
    seen.page.click("#phorge-signin")
    seen.page.wait_for_url(lambda url: urlsplit(url).path == "/auth/phorge/login/")
    seen.pages.append(seen.page.content())
    assert seen.statuses["/auth/phorge/login/"] == 503
    assert seen.page.inner_text("#phorge-auth-title") == "Phorge's OAuth Server is not installed"
    assert "phabricator.show-prototypes" in seen.page.inner_text("#phorge-auth-message")
    (missing,) = logged(logs, events.OAUTH_SERVER_MISSING)
    assert "phabricator.show-prototypes" in missing.getMessage()
    assert standin.token_requests == 0 and not seen.signed_in()

    standin.show_prototypes = True
    forget_probes()  # the few seconds this service remembers Phorge's last answer, over
    seen.sign_in_with_phorge()
    standin.show_prototypes = False  # turned off again: Conduit still answers the token
    before = standin.whoami_requests
    time.sleep(1.1)
    assert seen.signed_in()
    assert standin.whoami_requests > before
    assert not logged(logs, events.DEMOTED) and not logged(logs, events.SESSION_ENDED)
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def test_consent_once_and_continue_to_application_unless_trusted(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any
) -> None:
    """PhabricatorOAuthServerAuthController: every user authorizes the client once ("Authorize Access"),
    trusted or not; after that an untrusted client shows "Continue to Application" on every sign-in and a
    trusted one (bin/auth trust-oauth-client) goes on by itself."""
    standin.preauthorized = False
    standin.trusted = False
    alice = admin_user(standin)
    seen = Seen(browser, live_server.url)

    def start() -> None:
        seen.context.clear_cookies()
        seen.goto("/")
        seen.page.click("#phorge-signin")

    start()
    seen.page.wait_for_selector("#oauth-authorize")
    assert seen.page.inner_text("h1") == f'Authorize "{standin.client_name}"?'
    assert seen.page.inner_text("#oauth-authorize") == phorge_words.AUTHORIZE_BUTTON
    seen.page.click("#oauth-authorize")
    seen.page.wait_for_selector("#oauth-continue")
    assert seen.page.inner_text("#oauth-continue") == phorge_words.CONTINUE_BUTTON
    seen.page.click("#oauth-continue")
    seen.page.wait_for_url(f"{live_server.url}/")
    assert seen.signed_in() and alice.phid in standin.authorized

    start()  # untrusted, already authorized: no consent, but "Continue to Application" again
    seen.page.wait_for_selector("#oauth-continue")
    assert seen.page.locator("#oauth-authorize").count() == 0
    seen.page.click("#oauth-continue")
    seen.page.wait_for_url(f"{live_server.url}/")
    assert seen.signed_in()

    standin.trusted = True
    bob = admin_user(standin, "bob")
    start()  # trusted, not yet authorized: the consent dialog all the same, then straight on
    seen.page.wait_for_selector("#oauth-authorize")
    seen.page.click("#oauth-authorize")
    seen.page.wait_for_url(f"{live_server.url}/")
    assert seen.signed_in() and bob.phid in standin.authorized
    seen.context.clear_cookies()
    seen.sign_in_with_phorge()  # trusted and authorized: no click at Phorge at all
    assert seen.signed_in()
    assert [getattr(r, "user", None) for r in logged(logs, events.SIGNED_IN)] == ["alice", "alice", "bob", "bob"]
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and (b["y"] < a["y"] + a["height"])
    )


def _boxes(page: Any, **selectors: str) -> dict[str, dict[str, float]]:
    boxes = {}
    for name, selector in selectors.items():
        box = page.locator(selector).bounding_box()
        assert box is not None and box["width"] > 0 and box["height"] > 0, f"{name} ({selector}) is not shown"
        boxes[name] = box
    return boxes


def _assert_apart(boxes: dict[str, dict[str, float]], container: dict[str, float]) -> None:
    names = list(boxes)
    for i, first in enumerate(names):
        box = boxes[first]
        assert container["x"] <= box["x"] and box["x"] + box["width"] <= container["x"] + container["width"], first
        for second in names[i + 1 :]:
            assert not _overlap(box, boxes[second]), f"{first} {box} overlaps {second} {boxes[second]}"
    tops = [boxes[name]["y"] for name in names]
    assert tops == sorted(tops), f"not in page order top to bottom: {names}"


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 360])
@pytest.mark.parametrize("only", [True, False], ids=["oauth-only", "oauth-and-password"])
def test_login_page_sign_in_button_overlaps_nothing(
    phorge: Phorge, live_server: Any, browser: Any, settings: Any, only: bool, width: int
) -> None:
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id="PHID-OASC-layout", client_secret="layout-secret", url="http://127.0.0.1:9", only=only
    )
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    container = _boxes(page, container="#container")["container"]
    button = "#phorge-signin"
    if only:
        assert not page.locator("#login-form").is_visible()  # folded
        _assert_apart(_boxes(page, button=button, line="#break-glass > summary"), container)
        page.click("#break-glass > summary")
        assert page.locator("#login-form").is_visible()
        _assert_apart(_boxes(page, button=button, line="#break-glass > summary", form="#login-form"), container)
    else:
        assert page.locator("#break-glass").count() == 0
        _assert_apart(_boxes(page, button=button, form="#login-form"), container)

    # A wrong password: the page comes back with the error note above the form (unfolded in OAuth-only).
    page.fill("#id_username", "nobody")
    page.fill("#id_password", "wrong-password")
    with page.expect_navigation():
        page.click("#login-form input[type=submit]")
    assert page.locator(".errornote").count() >= 1
    shown = {"button": button, "note": ".errornote >> nth=0", "form": "#login-form"}
    if only:
        shown = {
            "button": button,
            "line": "#break-glass > summary",
            "note": ".errornote >> nth=0",
            "form": "#login-form",
        }
    _assert_apart(_boxes(page, **shown), container)
    context.close()


def test_readme_sign_in_steps_use_phorges_own_words() -> None:
    """The set-up steps (docs/operate/sign-in.md) name what Phorge's source shows and does (the stand-in
    carries the same words: tests/support/phorge_oauth_standin.py), and no longer the raw SQL or a consent
    screen that trust skips."""
    section = (ROOT / "docs/operate/sign-in.md").read_text()
    for words in (
        "bin/config set phabricator.show-prototypes true",
        "/oauthserver/",
        phorge_words.CREATE_BUTTON,
        phorge_words.SHOW_SECRET,
        phorge_words.AUTHORIZE_BUTTON,
        phorge_words.CONTINUE_BUTTON,
        "bin/auth trust-oauth-client --id",
        "bin/auth untrust-oauth-client --id",
        CALLBACK,
        "auth.signed_in",
    ):
        assert words in section, words
    assert "UPDATE " not in section and "isTrusted" not in section
    assert not re.search(r"skips? (its|the) consent", section)


def test_a_demoted_administrator_is_refused_at_the_next_action_after_the_bound(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any
) -> None:
    """Removed as an administrator in Phorge while signed in here: the session's own re-check is 300 s away,
    but an action asks Phorge again once its last answer is older than GORGE_PHORGE_OAUTH_ACTION_RECHECK_SEC."""
    from webhook_delivery.records.models import OperatorAction

    bound = 2
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id,
        client_secret=standin.client_secret,
        url=standin.url,
        recheck_sec=300,
        action_recheck_sec=bound,
    )
    hooks = [phorge.hook(f"http://127.0.0.1:9/{n}", name=f"Hook {n}") for n in range(3)]
    alice = admin_user(standin)
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge()
    asked = standin.whoami_requests

    def hold(hook: str) -> None:
        seen.goto(f"/hooks/{hook}/")
        seen.page.get_by_role("button", name="Hold", exact=True).click()
        seen.page.wait_for_load_state()
        seen.pages.append(seen.page.content())

    hold(hooks[0])  # within the bound of the sign-in's own question: Phorge is not asked again
    assert standin.whoami_requests == asked and OperatorAction.objects.count() == 1
    time.sleep(bound + 0.5)
    hold(hooks[1])  # past it: asked, still an administrator
    assert standin.whoami_requests == asked + 1 and OperatorAction.objects.count() == 2

    alice.admin = False  # "Remove Administrator" in Phorge
    time.sleep(bound + 0.5)
    hold(hooks[2])
    assert urlsplit(seen.page.url).path == "/auth/phorge/ended/"
    assert seen.page.inner_text("#phorge-auth-title") == "Your session has ended"
    assert "Phorge no longer lets you in here: it said, when asked again, that you are not a Phorge administrator" in (
        seen.page.inner_text("#phorge-auth-message")
    )
    assert OperatorAction.objects.count() == 2, "the demoted administrator's action was not written"
    assert not seen.signed_in()
    (demoted,) = logged(logs, events.DEMOTED)
    assert_names(demoted, "alice", alice.phid)
    assert getattr(demoted, "reason", None) == "not a Phorge administrator"
    user = get_user_model().objects.get(phorge_account__phid=alice.phid)
    assert not user.is_staff and not user.has_perm(OPERATE_PERMISSION)
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)
