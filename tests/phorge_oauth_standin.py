"""A local stand-in for Phorge's OAuth 2 server and Conduit's user.whoami, answering as Phorge's source does
(src/applications/oauthserver/, PhabricatorConduitAPIController, UserWhoAmIConduitAPIMethod):

* GET /oauthserver/auth/?client_id&response_type=code&redirect_uri&state: for a trusted client and the
  "logged-in" Phorge user the test chose, a redirect at once to redirect_uri with code, scope and state.
  The redirect URI must have the registered one's scheme, host and port (Phorge's secondary redirect URI
  rule); errors are an HTML dialog ("OAuth: ...", "OAuth Error Code: ..."), as Phorge renders them.
* POST /oauthserver/token/ (grant_type, code, redirect_uri, client_id, client_secret): checks in Phorge's
  order; a code lives 300 s, is bound to its client and redirect URI, and is deleted once exchanged. The
  answer is {"access_token", "token_type": "Bearer"} or HTTP 400 {"error", "error_description"} (Phorge's
  descriptions quote the code, so a client that shows them leaks it).
* /api/user.whoami (GET or POST, access_token as a parameter): {"result": {...}, "error_code": null,
  "error_info": null}, or ERR-INVALID-AUTH / ERR-USER-DISABLED with HTTP 200.

The test changes users' roles (demote, disable) and can make the whole server answer 502 (an outage
behind a proxy) or stop it (connection refused). Every code, token and secret it hands out is kept in
`secrets()` so a test can prove none of them reached a log line or a page.
"""

from __future__ import annotations

import json
import secrets as random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

CODE_TTL_SEC = 300


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
    trusted: bool = True
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
        return user

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
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
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
    def auth(self, params: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
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
            return 200, {"Content-Type": "text/html; charset=UTF-8"}, b"<h1>Log In</h1>"
        if not self.trusted:
            return 200, {"Content-Type": "text/html; charset=UTF-8"}, b'<h1>Authorize "gorge"?</h1>'
        if self.forged_reply is not None:
            reply, self.forged_reply = {"state": params.get("state", ""), **self.forged_reply}, None
            return 302, {"Location": _with_query(uri, reply)}, b""
        code = self.issue_code(self.users[self.logged_in], uri)
        query = {"code": code, "scope": "", "state": params.get("state", "")}
        return 302, {"Location": _with_query(uri, {k: v for k, v in query.items() if v})}, b""

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
        return _json(200, {"access_token": token, "token_type": "Bearer"})

    def whoami(self, params: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.whoami_requests += 1
            phid = self.tokens.get(params.get("access_token", ""))
        if phid is None:
            error = {"result": None, "error_code": "ERR-INVALID-AUTH", "error_info": "Access token does not exist."}
            return _json(200, error)
        user = self.users[phid]
        if user.disabled:
            return _json(200, {"result": None, "error_code": "ERR-USER-DISABLED", "error_info": "User is disabled."})
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

    def _answer(self) -> None:
        path, params = self._params()
        if self.owner.outage:
            status, headers, body = 502, {"Content-Type": "text/html"}, b"<h1>502 Bad Gateway</h1>"
        elif path == "/oauthserver/auth/" and self.command == "GET":
            status, headers, body = self.owner.auth(params)
        elif path == "/oauthserver/token/":
            status, headers, body = self.owner.token(params)
        elif path == "/api/user.whoami":
            status, headers, body = self.owner.whoami(params)
        else:
            status, headers, body = 404, {"Content-Type": "text/plain"}, b"not found"
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
