"""Test-database helper for scripts/with-test-db.sh (standard library and mysqlclient only).

ping: exit 0 when the server of GORGE_TEST_DATABASE_URL answers, else say why.
root SOCKET: allow root over TCP on a private throwaway server (connects by its socket).
free-port: print a free TCP port on loopback.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import MySQLdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.testdb import server  # the one reader of GORGE_TEST_DATABASE_URL


def ping() -> int:
    test = server()
    try:
        test.connect(connect_timeout=3).close()
    except MySQLdb.OperationalError as exc:
        sys.stderr.write(f"no MariaDB/MySQL answers at {test.host}:{test.port} as {test.user!r}: {exc.args[-1]}\n")
        return 1
    sys.stdout.write(f"{test.host}:{test.port}\n")
    return 0


def allow_root_over_tcp(socket_path: str) -> int:
    connection = MySQLdb.connect(unix_socket=socket_path, user="root", autocommit=True)
    cursor = connection.cursor()
    for host in ("127.0.0.1", "::1"):
        cursor.execute(f"CREATE USER IF NOT EXISTS 'root'@'{host}'")
        cursor.execute(f"GRANT ALL PRIVILEGES ON *.* TO 'root'@'{host}' WITH GRANT OPTION")
    connection.close()
    return 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sys.stdout.write(f"{sock.getsockname()[1]}\n")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["ping"]:
        return ping()
    if argv[:1] == ["root"] and len(argv) == 2:
        return allow_root_over_tcp(argv[1])
    if argv[:1] == ["free-port"]:
        return free_port()
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
