"""A webhook receiver on loopback that checks every signature the way a Phorge receiver would.

Each path belongs to one demo hook and knows that hook's HMAC key. The last path segment picks the
answer: `ok` 200, `broken` 500 always, `flaky` 503 on the first call for an object and 200 after.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from webhook_delivery.phorge.payload import SIGNATURE_HEADER

MAX_BODY = 1 << 20


@dataclass(frozen=True)
class Call:
    path: str
    object_phid: str
    signature_valid: bool
    answered: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: DemoReceiver


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        body = self.rfile.read(length)
        status = self.server.receiver.record(self.path, body, self.headers.get(SIGNATURE_HEADER) or "")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok" if status == 200 else b"no")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        """Quiet: the demo prints its own summary."""


class DemoReceiver:
    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-receiver", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def expect(self, path: str, hmac_key: str) -> None:
        with self._lock:
            self.keys[path] = hmac_key

    def record(self, path: str, body: bytes, signature: str) -> int:
        with self._lock:
            key = self.keys.get(path)
            expected = "" if key is None else hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
            valid = bool(key) and hmac.compare_digest(expected, signature)
            try:
                object_phid = str(json.loads(body)["object"]["phid"])
            except (ValueError, KeyError, TypeError):
                object_phid = ""
            behaviour = path.rsplit("/", 1)[-1]
            earlier = sum(1 for call in self.calls if call.path == path and call.object_phid == object_phid)
            if key is None:
                status = 404
            elif behaviour == "broken" or (behaviour == "flaky" and earlier == 0):
                status = 500 if behaviour == "broken" else 503
            else:
                status = 200
            self.calls.append(Call(path, object_phid, valid, status))
            return status

    def attempts(self) -> Counter[str]:
        with self._lock:
            return Counter(call.object_phid for call in self.calls)

    def __enter__(self) -> DemoReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
