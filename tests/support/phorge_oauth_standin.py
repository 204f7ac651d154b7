"""A local stand-in for Phorge's OAuth 2 server and Conduit's user.whoami, answering as Phorge's source does
(src/applications/oauthserver/, PhabricatorConduitAPIController, UserWhoAmIConduitAPIMethod):

* The OAuth Server is a prototype application (PhabricatorOAuthServerApplication::isPrototype), and
  Phorge routes only installed applications (PhabricatorPlatformSite::getRoutingMaps,
  PhabricatorApplication::isInstalled): unless `phabricator.show-prototypes` is on (and the application is
  not in `phabricator.uninstalled-applications`), every page under /oauthserver/ answers Phorge's
  "404 Not Found", the auth and token endpoints included. Conduit is not gated: /api/user.whoami answers
  an access token issued earlier either way (Conduit checks the method's application, People, which cannot
  be uninstalled, and reads the token without asking whether the OAuth Server is installed).
  `show_prototypes` defaults to on, what the sign-in tests need; Phorge's own default is off.
* GET /oauthserver/: the client list, with the crumb button "Create OAuth Server" (the edit engine's
  create text); /oauthserver/client/view/<id>/: the client's page ("Client PHID", "Show Application
  Secret").
* GET /oauthserver/auth/?client_id&response_type=code&redirect_uri&state (PhabricatorOAuthServerAuthController):
  the redirect URI must have the registered one's scheme, host and port (Phorge's secondary redirect URI
  rule); errors are an HTML dialog ("OAuth: ...", "OAuth Error Code: ..."), as Phorge renders them. A user
  who has not authorized the client yet gets the consent dialog ('Authorize "<name>"?', "Authorize
  Access", which POSTs back here, or "Do Not Authorize"), trusted client or not. Once authorized, an
  untrusted client gets the "Continue to Application" dialog on every sign-in, and a trusted one a page
  that goes on to the redirect URI by itself ("... confirmed, redirecting..."). Users added with
  `preauthorized` (the default) have authorized the client already.
* POST /oauthserver/token/ (grant_type, code, redirect_uri, client_id, client_secret): checks in Phorge's
  order; a code lives 300 s, is bound to its client and redirect URI, and is deleted once exchanged. The
  answer is {"access_token", "token_type": "Bearer"} or HTTP 400 {"error", "error_description"} (Phorge's
  descriptions quote the code, so a client that shows them leaks it).
* /api/user.whoami (GET or POST, access_token as a parameter): {"result": {...}, "error_code": null,
  "error_info": null}, or ERR-INVALID-AUTH with HTTP 200 (an unknown token, a disabled user).

The test changes users' roles (demote, disable) and can make the whole server answer 502 (an outage
behind a proxy) or stop it (connection refused). Every code, token and secret it hands out is kept in
`secrets()` so a test can prove none of them reached a log line or a page.
"""

from __future__ import annotations

import html
import json
import re
import secrets as random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from tests.support import ROOT
from tests.support.rawserver import serve_in_thread

CODE_TTL_SEC = 300
# Phorge's words, from its source (pht() strings): the edit engine's create button, the client page's
# action, the authorization dialogs' buttons, and the 404 dialog's title.
CREATE_BUTTON = "Create OAuth Server"
SHOW_SECRET = "Show Application Secret"
AUTHORIZE_BUTTON = "Authorize Access"
CONTINUE_BUTTON = "Continue to Application"
NOT_FOUND_TITLE = "404 Not Found"


@dataclass
class PhorgeUser:
    phid: str
    user_name: str
    real_name: str
    email: str
    admin: bool = False
    disabled: bool = False

    def roles(self) -> list[str]:
        roles = []
        if self.disabled:
            roles.append("disabled")
        else:
            roles.append("activated")
        if self.admin:
            roles.append("admin")
        roles += ["verified", "approved"]
        return roles


@dataclass
class _Code:
    client_id: str
    redirect_uri: str
    user_phid: str
    created: float


@dataclass
class PhorgeStandin:
    client_id: str = field(default_factory=lambda: "PHID-OASC-" + random.token_hex(10))
    client_secret: str = field(default_factory=lambda: random.token_hex(16))
    redirect_uri: str = ""  # registered with the client; set before use
    client_name: str = "gorge-webhook"
    client_numeric_id: int = 1  # the client's ID, as in /oauthserver/client/view/<id>/ and `--id`
    trusted: bool = True  # `bin/auth trust-oauth-client --id <id>`
    show_prototypes: bool = True  # phabricator.show-prototypes (Phorge's default: false)
    uninstalled: bool = False  # the OAuth Server listed in phabricator.uninstalled-applications
    preauthorized: bool = True  # add_user's users have already pressed "Authorize Access" for the client
    authorized: set[str] = field(default_factory=set)  # PHIDs with a client authorization row
    users: dict[str, PhorgeUser] = field(default_factory=dict)
    logged_in: str | None = None  # PHID of the Phorge user whose browser "is logged in to Phorge"
    outage: bool = False  # every request answers 502, as a proxy in front of a dead Phorge would
    # Test hook: the next auth request is answered with these parameters instead (the true state unless
    # given), as a forged or replayed answer would reach the callback.
    forged_reply: dict[str, str] | None = None
    codes: dict[str, _Code] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # token -> user PHID
    issued: list[str] = field(default_factory=list)  # every code and token ever handed out
    token_requests: int = 0
    whoami_requests: int = 0
    auth_requests: int = 0  # GETs and POSTs of /oauthserver/auth/ (this service's probe among them)
    # Test hook, a hostile Phorge: path -> "trickle" (a byte every 0.3 s), "huge" (a 300 MB answer), "deep"
    # (JSON nested 100,000 levels) or, for the token endpoint, "infinite expiry" (expires_in: 1e400).
    misbehave: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _port: int = 0

    # ---- test controls --------------------------------------------------------------------------
    def add_user(self, user_name: str, *, admin: bool = False, disabled: bool = False) -> PhorgeUser:
        user = PhorgeUser(
            phid="PHID-USER-" + random.token_hex(10),
            user_name=user_name,
            real_name=user_name.title() + " Example",
            email=f"{user_name}@phorge.example",
            admin=admin,
            disabled=disabled,
        )
        self.users[user.phid] = user
        if self.preauthorized:
            self.authorized.add(user.phid)
        return user

    def oauth_server_installed(self) -> bool:
        """PhabricatorApplication::isInstalled for the OAuth Server (a prototype that can be uninstalled)."""
        return self.show_prototypes and not self.uninstalled

    def secrets(self) -> list[str]:
        with self.lock:
            return [self.client_secret, *self.issued]

    def issue_code(self, user: PhorgeUser, redirect_uri: str, client_id: str | None = None) -> str:
        code = random.token_hex(16)  # Phorge: 32 random characters
        with self.lock:
            self.codes[code] = _Code(client_id or self.client_id, redirect_uri, user.phid, time.time())
            self.issued.append(code)
        return code

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> PhorgeStandin:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        serve_in_thread(self._server)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> PhorgeStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- Phorge's endpoints ---------------------------------------------------------------------
    def auth(self, params: dict[str, str], *, posted: bool = False) -> tuple[int, dict[str, str], bytes]:
        client_id = params.get("client_id", "")
        if not client_id:
            return _dialog("Malformed Request", "invalid_request")
        if client_id != self.client_id:
            return _dialog("Invalid Client Application", "invalid_request")
        redirect_uri = params.get("redirect_uri", "")
        if redirect_uri:
            if not _secondary_redirect_ok(redirect_uri, self.redirect_uri):
                return _dialog("Invalid Redirect URI", "invalid_request")
            uri = redirect_uri
        else:
            uri = self.redirect_uri
        response_type = params.get("response_type", "")
        if not response_type:
            return _dialog("Invalid Response Type", "invalid_request")
        if response_type != "code":
            return _dialog("Unsupported Response Type", "unsupported_response_type")
        if self.logged_in is None:
            return _html("<h1>Log In</h1>")
        if self.forged_reply is not None:
            reply, self.forged_reply = {"state": params.get("state", ""), **self.forged_reply}, None
            return 302, {"Location": _with_query(uri, reply)}, b""
        if posted:  # the consent dialog's "Authorize Access"
            self.authorized.add(self.logged_in)
        if self.logged_in not in self.authorized:
            return self._consent(params, uri)
        code = self.issue_code(self.users[self.logged_in], uri)
        query = {"code": code, "scope": "", "state": params.get("state", "")}
        full_uri = _with_query(uri, {k: v for k, v in query.items() if v})
        name = html.escape(self.client_name)
        target = html.escape(full_uri)
        if self.trusted:
            # Phorge renders this page and sends the browser on with a script (Javelin's "redirect"
            # behavior), not with a 302: see T13099 in PhabricatorOAuthServerAuthController.
            script = json.dumps(full_uri).replace("</", "<\\/")
            return _html(
                f"<h1>Authenticate: {name}</h1><p>Authorization for <strong>{name}</strong> confirmed, "
                f'redirecting...</p><a href="{target}">Continue</a><script>window.location.replace({script});</script>'
            )
        return _html(
            f"<h1>Authenticate: {name}</h1><p>This application (<strong>{name}</strong>) is authorized to use "
            f"your Phorge credentials. Continue to complete the authentication workflow.</p>"
            f'<a id="oauth-continue" href="{target}">{CONTINUE_BUTTON}</a>'
        )

    def _consent(self, params: dict[str, str], uri: str) -> tuple[int, dict[str, str], bytes]:
        name = html.escape(self.client_name)
        hidden = "".join(
            f'<input type="hidden" name="{key}" value="{html.escape(params.get(key, ""))}">'
            for key in ("client_id", "redirect_uri", "response_type", "state", "scope")
        )
        declined = {"error": "access_denied", "error_description": "The user declined to authorize this application."}
        return _html(
            f'<h1>Authorize "{name}"?</h1><form method="POST" action="/oauthserver/auth/">{hidden}'
            f"<p>Do you want to authorize the external application <strong>{name}</strong> to access your Phorge "
            f"account data, including your primary email address?</p>"
            f'<button id="oauth-authorize" type="submit">{AUTHORIZE_BUTTON}</button>'
            f'<a href="{html.escape(_with_query(uri, declined))}">Do Not Authorize</a></form>'
        )

    def client_list(self) -> tuple[int, dict[str, str], bytes]:
        view = f"/oauthserver/client/view/{self.client_numeric_id}/"
        return _html(
            f'<h1>OAuth Server</h1><a id="oauth-create" href="/oauthserver/edit/">{CREATE_BUTTON}</a>'
            f'<ul><li><a href="{view}">{html.escape(self.client_name)}</a></li></ul>'
        )

    def client_view(self, numeric_id: int) -> tuple[int, dict[str, str], bytes]:
        if numeric_id != self.client_numeric_id:
            return _not_found()
        return _html(
            f"<h1>OAuth Application: {html.escape(self.client_name)}</h1>"
            f'<a href="/oauthserver/client/secret/{numeric_id}/">{SHOW_SECRET}</a>'
            f"<dl><dt>Client PHID</dt><dd>{self.client_id}</dd>"
            f"<dt>Redirect URI</dt><dd>{html.escape(self.redirect_uri)}</dd></dl>"
        )

    def token(self, params: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.token_requests += 1
            return self._token(params)

    def _token(self, params: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        code = params.get("code", "")
        client_id = params.get("client_id", "")
        secret = params.get("client_secret", "")
        if params.get("grant_type") != "authorization_code":
            return _oauth_error("unsupported_grant_type", "Only grant_type authorization_code is supported.")
        if not code:
            return _oauth_error("invalid_request", "Required parameter code missing.")
        if not client_id:
            return _oauth_error("invalid_request", "Required parameter client_id missing.")
        if not secret:
            return _oauth_error("invalid_request", "Required parameter client_secret missing.")
        grant = self.codes.get(code)
        if grant is None:
            return _oauth_error("invalid_grant", f"Authorization code {code} not found.")
        redirect_uri = params.get("redirect_uri", "")
        if grant.redirect_uri:
            if not urlsplit(redirect_uri).hostname or redirect_uri != grant.redirect_uri:
                return _oauth_error(
                    "invalid_grant", "Redirect URI in request must exactly match redirect URI from authorization code."
                )
        elif redirect_uri:
            return _oauth_error("invalid_grant", "Redirect URI in request and no redirect URI in authorization code.")
        if client_id != self.client_id:
            return _oauth_error("invalid_client", f"Client with client_id {client_id} not found.")
        if grant.user_phid not in self.users:
            return _oauth_error("invalid_grant", f"User with PHID {grant.user_phid} not found.")
        # PhabricatorOAuthServer::validateAuthorizationCode: same client, right secret, under 300 s old.
        if grant.client_id != client_id or secret != self.client_secret or time.time() - grant.created > CODE_TTL_SEC:
            return _oauth_error("invalid_grant", f"Invalid authorization code {code}.")
        token = random.token_hex(16)
        self.tokens[token] = grant.user_phid
        self.issued.append(token)
        del self.codes[code]
        if self.misbehave.get("/oauthserver/token/") == "infinite expiry":
            body = f'{{"access_token": "{token}", "token_type": "Bearer", "expires_in": 1e400}}'.encode()
            return 200, {"Content-Type": "application/json"}, body
        return _json(200, {"access_token": token, "token_type": "Bearer"})

    def whoami(self, params: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.whoami_requests += 1
            phid = self.tokens.get(params.get("access_token", ""))
        if phid is None:
            error = {"result": None, "error_code": "ERR-INVALID-AUTH", "error_info": "Access token does not exist."}
            return _json(200, error)
        user = self.users[phid]
        if user.disabled:  # PhabricatorConduitAPIController::validateAuthenticatedUser: canEstablishAPISessions()
            info = "User account is not permitted to use the API."
            return _json(200, {"result": None, "error_code": "ERR-INVALID-AUTH", "error_info": info})
        result = {
            "phid": user.phid,
            "userName": user.user_name,
            "realName": user.real_name,
            "image": f"{self.url}/res/phabricator/profile.png",
            "uri": f"{self.url}/p/{user.user_name}/",
            "roles": user.roles(),
            "primaryEmail": user.email,
        }
        return _json(200, {"result": result, "error_code": None, "error_info": None})


class _Handler(BaseHTTPRequestHandler):
    owner: PhorgeStandin

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stand-in keeps quiet
        return

    def _params(self) -> tuple[str, dict[str, str]]:
        parts = urlsplit(self.path)
        params = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if self.command == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode()
            params.update({k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()})
        return parts.path, params

    def _hostile(self, how: str) -> None:
        if how == "trickle":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for byte in b"Content-Type: application/json\r\n" * 100:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.3)
            return
        if how == "huge":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(300 * 1024 * 1024))
            self.end_headers()
            self.wfile.write(b'{"result": "')
            for _ in range(300 * 16):
                self.wfile.write(b"x" * 65536)
            return
        body = b"[" * 100_000 + b"]" * 100_000 if how == "deep" else b""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self) -> None:
        path, params = self._params()
        owner = self.owner
        view = _CLIENT_VIEW.fullmatch(path)
        if path == "/oauthserver/auth/":
            with owner.lock:
                owner.auth_requests += 1
        hostile = owner.misbehave.get(path)
        if hostile in ("trickle", "huge", "deep"):
            try:
                self._hostile(hostile)
            except OSError:
                pass  # the client gave up on it, as it should
            return
        if owner.outage:
            status, headers, body = 502, {"Content-Type": "text/html"}, b"<h1>502 Bad Gateway</h1>"
        elif path.startswith("/oauthserver/") and not owner.oauth_server_installed():
            status, headers, body = _not_found()  # not in the routing map: Phorge's 404 controller
        elif path == "/oauthserver/" and self.command == "GET":
            status, headers, body = owner.client_list()
        elif view is not None and self.command == "GET":
            status, headers, body = owner.client_view(int(view.group(1)))
        elif path == "/oauthserver/auth/":
            status, headers, body = owner.auth(params, posted=self.command == "POST")
        elif path == "/oauthserver/token/":
            status, headers, body = owner.token(params)
        elif path == "/api/user.whoami":
            status, headers, body = owner.whoami(params)
        else:
            status, headers, body = _not_found()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()


_CLIENT_VIEW = re.compile(r"/oauthserver/client/view/(\d+)/")


def _html(body: str, status: int = 200) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "text/html; charset=UTF-8"}, body.encode()


def _not_found() -> tuple[int, dict[str, str], bytes]:
    """Aphront404Response: HTTP 404 and its dialog."""
    return _html(
        f"<h1>{NOT_FOUND_TITLE}</h1><p>You arrive at your destination, but there is nothing here.</p>", status=404
    )


def _json(status: int, value: object) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(value).encode()


def _oauth_error(error: str, description: str) -> tuple[int, dict[str, str], bytes]:
    return _json(400, {"error": error, "error_description": description})


def _dialog(title: str, code: str) -> tuple[int, dict[str, str], bytes]:
    body = f"<h1>OAuth: {title}</h1><p>OAuth Error Code: <tt>{code}</tt></p>"
    return 200, {"Content-Type": "text/html; charset=UTF-8"}, body.encode()


def _secondary_redirect_ok(wanted: str, registered: str) -> bool:
    a, b = urlsplit(wanted), urlsplit(registered)
    if a.fragment or not a.hostname:
        return False
    if (a.scheme, a.hostname, a.port) != (b.scheme, b.hostname, b.port):
        return False
    have = parse_qs(a.query)
    return all(have.get(key) == value for key, value in parse_qs(b.query).items())


def _with_query(uri: str, params: dict[str, str]) -> str:
    parts = urlsplit(uri)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update(params)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def settings_errors(**env: str) -> dict[str, Any]:
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
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result
