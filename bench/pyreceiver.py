"""Fallback receiver when nginx is missing: same routes and the same log line format as bench/receivers.py.

`python bench/pyreceiver.py PORT LOGFILE`. POST /fail/... answers 500, anything else 200; every request logs
"<epoch seconds.millis> <status> <path> <signature header or ->". Slower than nginx: smoke runs only.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import hitlog


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log: ClassVar[IO[str]]
    log_lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status = 500 if self.path.startswith("/fail/") else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        line = hitlog.line(status, self.path, self.headers.get(hitlog.SIGNATURE_HEADER, "-"))
        with self.log_lock:
            self.log.write(line)
            self.log.flush()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    with open(path, "a", encoding="ascii") as log:
        Handler.log = log
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        server.serve_forever()


if __name__ == "__main__":
    main()
