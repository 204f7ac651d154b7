"""A local stand-in for the chat services the docs name, for Apprise's real plugins: one HTTP(S) server that
takes whatever each plugin posts, answers as the service would so that the plugin counts the message as
sent, and keeps every request. The plugins that post only to their service's own host (Slack, Discord,
Telegram, Zulip) are pointed at it through their class attribute (`point`, in the process each send runs
in: `point_plugins`); Teams (Apprise's `workflows`)
posts over https only: the server then speaks TLS with a throwaway certificate (`?verify=no` in the URL).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.rawserver import serve_in_thread


@dataclass
class Posted:
    method: str
    path: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ChatServices:
    tls: Path | None = None  # a directory for the throwaway certificate: the server speaks TLS
    posted: list[Posted] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def received(self, prefix: str) -> list[Posted]:
        with self.lock:
            return [post for post in self.posted if post.path.startswith(prefix)]

    def start(self) -> ChatServices:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        if self.tls is not None:
            cert, key = self.tls / "cert.pem", self.tls / "key.pem"
            request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=x"]
            subprocess.run(
                [*request, "-keyout", str(key), "-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1"],
                check=True,
                capture_output=True,
            )
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        serve_in_thread(server)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def point(self, monkeypatch: pytest.MonkeyPatch, where: Path) -> None:
        """Slack's, Discord's, Telegram's and Zulip's plugins post to this server instead of their service."""
        point_plugins(
            monkeypatch,
            where,
            {
                "slack.NotifySlack.webhook_url": f"{self.base}/services",
                "discord.NotifyDiscord.notify_url": f"{self.base}/api/webhooks",
                "telegram.NotifyTelegram.notify_url": f"{self.base}/bot",
                "zulip.NotifyZulip.notify_url": f"{self.base}/zulip/{{org}}.{{hostname}}/api/v1/messages",
            },
        )


def point_plugins(monkeypatch: pytest.MonkeyPatch, where: Path, pointed: dict[str, str]) -> None:
    """Set class attributes of Apprise's plugins (`slack.NotifySlack.webhook_url`: the address its service is
    posted to) in the process each send runs in: a `sitecustomize` module in `where`, which Python imports at
    start from PYTHONPATH (the send's process keeps the watcher's PYTHONPATH after the project's root)."""
    lines = ["import importlib", ""]
    for name, value in pointed.items():
        module, cls, attribute = name.split(".")
        lines.append(f"setattr(importlib.import_module('apprise.plugins.{module}').{cls}, {attribute!r}, {value!r})")
    (where / "sitecustomize.py").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("PYTHONPATH", str(where))


def _answer(path: str) -> tuple[int, bytes, str]:
    """What each service answers a message it took."""
    if path.startswith("/services/"):
        return 200, b"ok", "text/plain"  # Slack's incoming webhooks
    if path.startswith("/bot"):
        return 200, json.dumps({"ok": True, "result": {"message_id": 1}}).encode(), "application/json"
    if path.startswith("/zulip/"):
        return 200, json.dumps({"result": "success", "msg": "", "id": 1}).encode(), "application/json"
    if path.startswith("/_matrix/"):
        matrix = {"access_token": "standin", "user_id": "@gorge:127.0.0.1", "home_server": "127.0.0.1"}
        matrix |= {"device_id": "STANDIN", "room_id": "!room:127.0.0.1", "event_id": "$event", "joined_rooms": []}
        return 200, json.dumps(matrix).encode(), "application/json"
    if path.startswith("/api/webhooks/"):
        return 200, json.dumps({"id": "1", "type": 0}).encode(), "application/json"  # Discord, ?wait=true
    return 200, json.dumps({"ok": True}).encode(), "application/json"


def _handler(services: ChatServices) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with services.lock:
                services.posted.append(Posted(self.command, self.path, body))
            status, answer, kind = _answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = _serve  # noqa: N815 - BaseHTTPRequestHandler's names

    return Handler
