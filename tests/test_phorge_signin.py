"""Sign in with Phorge, end to end in headless Chromium against a local stand-in for Phorge's OAuth server
and Conduit (tests/phorge_oauth_standin.py): who gets in, who is refused, forged and replayed answers,
re-checks while signed in, the break-glass account while Phorge is down, and no secret in a log or a page."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session

from tests.helpers import PHORGE_DB, Phorge, viewer
from tests.phorge_oauth_standin import PhorgeStandin, PhorgeUser
from webhook_delivery.phorge_auth.config import PhorgeOAuthConfig
from webhook_delivery.phorge_auth.models import PhorgeAccount
from webhook_delivery.web.access import VIEW_PERMISSION

pytestmark = [PHORGE_DB, pytest.mark.browser]

CALLBACK = "/auth/phorge/callback/"


@pytest.fixture
def browser(chromium: Any) -> Any:
    return chromium  # Debian's chromium, launched once per test as in the dashboard test


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log line, at DEBUG, from every logger (the HTTP clients' and Authlib's included)."""
    caplog.set_level(logging.DEBUG)
    for name in ("urllib3", "authlib", "django", "django.request", "webhook_delivery"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


@pytest.fixture
def standin(live_server: Any, settings: Any) -> Iterator[PhorgeStandin]:
    with PhorgeStandin(redirect_uri=f"{live_server.url}{CALLBACK}") as running:
        settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
            client_id=running.client_id, client_secret=running.client_secret, url=running.url, recheck_sec=300
        )
        yield running


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
    assert not user.has_usable_password()
    assert standin.token_requests == 1 and standin.whoami_requests == 1
    seen.goto("/admin/webhook_delivery/heraldwebhookrequest/")
    assert seen.statuses["/admin/webhook_delivery/heraldwebhookrequest/"] == 200

    # Renamed in Phorge: the same Django user (keyed by PHID), with the new name.
    seen.context.clear_cookies()
    alice.user_name = "alice2"
    seen.sign_in_with_phorge()
    assert get_user_model().objects.get(phorge_account__phid=alice.phid).username == "alice2"
    assert PhorgeAccount.objects.count() == 1
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
    assert "/admin/login/" in seen.page.url
    assert "Signed out" in seen.page.inner_text("body")
    user = get_user_model().objects.get(phorge_account__phid=alice.phid)
    assert not user.is_staff and not user.has_perm(VIEW_PERMISSION)
    assert PhorgeAccount.objects.get(phid=alice.phid).token_encrypted == ""
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def test_unreachable_phorge_keeps_the_session_for_a_bounded_grace_and_logs_it_once(
    phorge: Phorge, live_server: Any, standin: PhorgeStandin, browser: Any, logs: Any, settings: Any
) -> None:
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id=standin.client_id, client_secret=standin.client_secret, url=standin.url, recheck_sec=2
    )
    admin_user(standin)
    seen = Seen(browser, live_server.url)
    seen.sign_in_with_phorge()
    standin.outage = True
    time.sleep(2.1)
    assert seen.signed_in()  # first failed re-check: kept
    time.sleep(2.1)
    assert seen.signed_in()  # second: kept
    warnings = [r for r in logs.records if "gives no answer" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    time.sleep(2.1)
    assert not seen.signed_in()  # third: the session ends
    assert len([r for r in logs.records if "gives no answer" in r.getMessage()]) == 1
    assert any("gave no answer to 3 re-checks" in r.getMessage() for r in logs.records)
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
    assert any("password login refused for operator" in r.getMessage() for r in logs.records)
    seen.close()
    assert_no_secret_anywhere(standin, logs, seen)


def _settings_errors(**env: str) -> dict[str, str]:
    import json
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith("GORGE_")}
    clean.update(SECRET_KEY="x" * 50, GORGE_ENV_FILE="/dev/null", DATABASE_URL="sqlite://:memory:", **env)
    code = (
        "import json, gorge_site.settings as s; "
        "errors = {e.variable: e.message for e in s.GORGE_CONFIG_ERRORS if 'PHORGE_OAUTH' in e.variable}; "
        "print(json.dumps({'errors': errors, 'oauth': repr(s.GORGE_PHORGE_OAUTH),"
        " 'only': s.GORGE_PHORGE_OAUTH.only, 'users': s.GORGE_PHORGE_OAUTH.break_glass_users,"
        " 'recheck': s.GORGE_PHORGE_OAUTH.recheck_sec, 'site': s.GORGE_PHORGE_OAUTH.site_url}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=clean,
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_settings_are_read_and_checked_like_the_rest() -> None:
    good = _settings_errors(
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

    bad = _settings_errors(
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
    assert _settings_errors(GORGE_PHORGE_OAUTH_ONLY="true")["errors"].keys() == {"GORGE_PHORGE_OAUTH_ONLY"}


def test_phorge_address_defaults_to_phorges_base_uri(phorge: Phorge, settings: Any) -> None:
    import dataclasses

    from webhook_delivery.phorge_auth.phorge import oauth_app, phorge_url

    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, phorge_base_uri="https://phorge.example.org")
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(client_id="PHID-OASC-x", client_secret="y")
    assert phorge_url() == "https://phorge.example.org"
    app = oauth_app()
    assert app.authorize_url == "https://phorge.example.org/oauthserver/auth/"
    assert app.access_token_url == "https://phorge.example.org/oauthserver/token/"
    settings.GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
        client_id="PHID-OASC-x", client_secret="y", url="https://phorge.internal"
    )
    assert phorge_url() == "https://phorge.internal"
