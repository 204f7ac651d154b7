"""Extra MariaDB servers started by the suite, each on its own port and data directory (a partitioned
Phorge's other masters). Needs Debian's mariadb-server binaries (mariadbd, mariadb-install-db), as the
private server of scripts/with-test-db.sh does.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import MySQLdb
from django.db import connections

from tests.support.testdb import Server


def mariadbd() -> str | None:
    for candidate in (shutil.which("mariadbd"), "/usr/sbin/mariadbd", "/usr/local/sbin/mariadbd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateServer:
    """A throwaway MariaDB server under `base`: `start()` (again after `stop()`, same data and port),
    `stop()` (a clean shutdown, as an operator's restart), `server` (root over TCP, no password)."""

    def __init__(self, base: Path, *args: str) -> None:
        binary = mariadbd()
        if binary is None:
            raise RuntimeError("extra MariaDB servers need mariadbd (apt-get install mariadb-server)")
        self.binary = binary
        self.base = base
        self.datadir = base / "data"
        self.socket = base / "mariadbd.sock"
        self.port = _free_port()
        self.server = Server("127.0.0.1", self.port, "root", "")
        self.args = args  # more mariadbd options, e.g. --log-bin for a replication source
        self.process: subprocess.Popen[bytes] | None = None
        self._as_root = ["--user=root"] if os.geteuid() == 0 else []

    def _install(self) -> None:
        install = Path(self.binary).parent.parent / "bin" / "mariadb-install-db"
        command = str(install) if install.exists() else shutil.which("mariadb-install-db")
        if command is None:
            raise RuntimeError("mariadbd is installed but mariadb-install-db is not")
        subprocess.run(
            [
                command,
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *self._as_root,
            ],
            check=True,
            capture_output=True,
        )

    def start(self, timeout: float = 60.0) -> Server:
        self.base.mkdir(parents=True, exist_ok=True)
        first = not self.datadir.exists()
        if first:
            self._install()
        log = (self.base / "stderr.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--socket={self.socket}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=16M",
                f"--log-error={self.base / 'error.log'}",
                *self.args,
                *self._as_root,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"mariadbd exited: {(self.base / 'error.log').read_text()[-2000:]}")
            try:
                if first:
                    self._allow_root_over_tcp()
                self.server.connect(connect_timeout=2).close()
                return self.server
            except MySQLdb.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _allow_root_over_tcp(self) -> None:
        connection = MySQLdb.connect(unix_socket=str(self.socket), user="root", autocommit=True)
        try:
            cursor = connection.cursor()
            cursor.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
            cursor.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
        finally:
            connection.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


class MariaDBUser:
    """A throwaway account and a Django connection to the herald database as that account."""

    def __init__(self, admin: Any, name: str, grants: str) -> None:
        self.admin = admin
        self.name = name
        self.password = secrets.token_urlsafe(16)
        with admin.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS '{name}'@'%'")
            cursor.execute(f"CREATE USER '{name}'@'%%' IDENTIFIED BY %s", (self.password,))
            for statement in grants.split(";\n"):
                statement = "\n".join(line for line in statement.splitlines() if not line.startswith("--"))
                if statement.strip():
                    cursor.execute(statement)
        base = connections["phorge"]
        self.connection = type(base)(
            {**base.settings_dict, "USER": name, "PASSWORD": self.password}, alias=f"phorge_as_{name}"
        )

    def drop(self) -> None:
        self.connection.close()
        with self.admin.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS '{self.name}'@'%'")
