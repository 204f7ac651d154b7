"""Local receivers that are not the bottleneck: Debian's nginx (`return 200`), or a Python fallback.

Both log one line per request (bench/hitlog.py): epoch millis, status, path, and the
X-Phabricator-Webhook-Signature header.
The signature is an HMAC of the exact body, and every seeded request has its own object PHID, so it
identifies the request: each one must appear exactly once. Every scenario puts its own tag in the hook
paths, so one log serves the whole run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from bench import hitlog
from bench.common import PYTHON, BenchError, free_port, process_cpu_seconds, wait_for_port
from bench.hitlog import Hit as Hit

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
LOG_FLUSH_SEC = 0.1


class Receiver:
    kind = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / f"{self.kind}-access.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> Receiver:
        raise NotImplementedError

    def pids(self) -> list[int]:
        return [] if self.proc is None else [self.proc.pid]

    def cpu_seconds(self) -> float:
        return sum(cpu for pid in self.pids() if (cpu := process_cpu_seconds(pid)) is not None)

    stop_signal = signal.SIGTERM

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def hits(self, prefix: str, *, expected: int = 0, timeout: float = 5.0) -> list[Hit]:
        """Every logged request whose path starts with `prefix` (waits for the log to catch up)."""
        deadline = time.monotonic() + timeout
        time.sleep(3 * LOG_FLUSH_SEC)
        while True:
            found = [hit for hit in self._read() if hit.path.startswith(prefix)]
            if len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(LOG_FLUSH_SEC)

    def _read(self) -> Iterator[Hit]:
        if not self.log_path.exists():
            return
        with self.log_path.open(encoding="ascii", errors="replace") as log:
            for line in log:
                hit = hitlog.parse(line)
                if hit is not None:
                    yield hit


class NginxReceiver(Receiver):
    kind = "nginx"

    def start(self) -> NginxReceiver:
        if NGINX is None:
            raise BenchError("nginx is not installed (apt-get install nginx-light), use --receiver python")
        temp = self.workdir / "nginx-temp"
        temp.mkdir(exist_ok=True)
        config = self.workdir / "nginx.conf"
        # Runs as the invoking user; as root nginx would switch its workers to `nobody` otherwise.
        user = "user root;" if os.geteuid() == 0 else ""
        config.write_text(
            f"""
{user}
worker_processes 1;
daemon off;
pid {self.workdir}/nginx.pid;
error_log {self.workdir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    keepalive_timeout 300s;
    keepalive_requests 100000000;
    log_format bench '$msec $status $uri $http_x_phabricator_webhook_signature';
    server {{
        listen 127.0.0.1:{self.port} reuseport;
        access_log {self.log_path} bench buffer=64k flush={int(LOG_FLUSH_SEC * 1000)}ms;
        location /fail/ {{ return 500; }}
        location / {{ return 200; }}
    }}
}}
"""
        )
        errors = (self.workdir / "nginx-stderr.log").open("ab")
        self.proc = subprocess.Popen([NGINX, "-c", str(config), "-p", str(self.workdir)], stderr=errors)
        errors.close()
        try:
            wait_for_port(self.port, 10)
        except BenchError:
            self.stop()
            raise BenchError(f"nginx did not start: {(self.workdir / 'nginx-stderr.log').read_text()}") from None
        return self

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                children.append(int(stat.parent.name))
        return [self.proc.pid, *children]

    stop_signal = signal.SIGQUIT  # graceful: flushes the access log


class PythonReceiver(Receiver):
    kind = "python"

    def start(self) -> PythonReceiver:
        script = Path(__file__).with_name("pyreceiver.py")
        self.proc = subprocess.Popen([PYTHON, str(script), str(self.port), str(self.log_path)])
        wait_for_port(self.port, 10)
        return self


class HangReceiver(Receiver):
    """bench/hangreceiver.py: `/dead...` never answers, `/slow<ms>/...` answers after a delay; logs arrivals
    with status 0 and answers with their status."""

    kind = "hang"

    def start(self) -> HangReceiver:
        script = Path(__file__).with_name("hangreceiver.py")
        self.proc = subprocess.Popen([PYTHON, str(script), str(self.port), str(self.log_path)])
        wait_for_port(self.port, 10)
        return self


def make_receiver(kind: str, workdir: Path) -> Receiver:
    if kind == "auto":
        kind = "nginx" if NGINX is not None else "python"
    if kind == "nginx":
        return NginxReceiver(workdir).start()
    if kind == "python":
        return PythonReceiver(workdir).start()
    if kind == "hang":
        return HangReceiver(workdir).start()
    raise BenchError(f"unknown receiver {kind!r}")
