"""Small shared pieces: paths, the MariaDB connection, process accounting, statistics."""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import MySQLdb

from tests.support import testdb

ROOT = Path(__file__).resolve().parent.parent
# The tree whose worker is measured: this one, or another commit's sources unpacked by bench/compare.py.
# The bench itself (seeding, receivers, figures) is always this tree's, so both are measured the same way.
TREE = Path(os.environ.get("BENCH_TREE") or ROOT).resolve()
PYTHON = sys.executable
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _server() -> testdb.Server:
    """The tests' server (GORGE_TEST_DATABASE_URL); the bench's older BENCH_MYSQL_* each replace their part."""
    server = testdb.server()
    return dataclasses.replace(
        server,
        host=os.environ.get("BENCH_MYSQL_HOST") or server.host,
        port=int(os.environ.get("BENCH_MYSQL_PORT") or server.port),
        user=os.environ.get("BENCH_MYSQL_USER") or server.user,
        password=os.environ.get("BENCH_MYSQL_PASSWORD", server.password),
    )


SERVER = _server()


class BenchError(RuntimeError):
    """Something the bench needs is broken (not a slow figure): the run exits non-zero."""


def connect(database: str | None = None) -> Any:
    try:
        return SERVER.connect(database)
    except MySQLdb.OperationalError as exc:
        raise BenchError(f"cannot connect to MariaDB at {SERVER.host}:{SERVER.port} as {SERVER.user}: {exc}") from exc


def database_url(database: str) -> str:
    return SERVER.url(database)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise BenchError(f"nothing listens on 127.0.0.1:{port}") from None
            time.sleep(0.05)


def tcp_ports(pid: int) -> set[int]:
    """The local TCP ports of a process's sockets (Linux /proc): which server sessions are its own."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def process_status(pid: int) -> dict[str, str]:
    """/proc/<pid>/status as a dict (VmRSS, Threads, ...); empty when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {key: value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())}


def process_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a running process (None when it is gone or unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def mariadb_pid(cursor: Any) -> int | None:
    """The server's pid, from its pid file, to charge it CPU time (None if not on this machine)."""
    cursor.execute("SELECT @@pid_file")
    path = Path(str(cursor.fetchone()[0]))
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if process_cpu_seconds(pid) is not None else None


def machine_busy_fraction(sample_sec: float = 1.0) -> float:
    """Share of all CPUs busy over a short sample: how much else runs on this machine right now."""

    def read() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = values[3] + values[4]
        return idle, sum(values)

    idle0, total0 = read()
    time.sleep(sample_sec)
    idle1, total1 = read()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def median(values: list[float]) -> float:
    return float(statistics.median(values))


@dataclass
class Stopwatch:
    started: float = 0.0

    def __enter__(self) -> Stopwatch:
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.started

    elapsed: float = 0.0
