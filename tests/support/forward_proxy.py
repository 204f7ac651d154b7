"""A real forward proxy as administrators run one: Debian's tinyproxy (package tinyproxy-bin), started on a
free loopback port with a configuration of the test's, CONNECT allowed for https. Its log says every
request it was asked for, to prove which hops it never saw."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from tests.support.waiting import wait_for


class ForwardProxy:
    def __init__(self, directory: Path, *, connect_ports: tuple[int, ...] = ()) -> None:
        """`connect_ports`: the only ports CONNECT may reach (tinyproxy's ConnectPort); none: every port."""
        self.directory = directory
        self.log = directory / "tinyproxy.log"
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Allow 127.0.0.1",
            "Timeout 30",
            "MaxClients 20",
            f'LogFile "{self.log}"',
            "LogLevel Connect",
            f'PidFile "{directory / "tinyproxy.pid"}"',
            *(f"ConnectPort {port}" for port in connect_ports),
        ]
        self.config = directory / "tinyproxy.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def asked(self) -> list[str]:
        """The requests the proxy was asked for, in order: `CONNECT host:port` or `METHOD absolute-URI`."""
        if not self.log.exists():
            return []
        marker = "): "
        return [
            line.split(marker, 1)[1].rsplit(" HTTP/", 1)[0]
            for line in self.log.read_text(errors="replace").splitlines()
            if "Request (file descriptor" in line and marker in line
        ]

    def __enter__(self) -> ForwardProxy:
        self.process = subprocess.Popen(
            ["tinyproxy", "-d", "-c", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(self._listening, timeout=10, what="tinyproxy listening")
        return self

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
