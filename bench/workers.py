"""deliver_webhooks as real processes: environment, wall time, exit status, peak RSS and CPU from wait4()."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import PYTHON, ROOT, BenchError, database_url


def worker_env(workdir: Path, database: str) -> dict[str, str]:
    """A hermetic environment: no .env, defaults for everything the brief does not set."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GORGE_") and key not in {"LOG_LEVEL", "LOG_FORMAT", "DATABASE_URL", "DEBUG"}
    }
    env.update(
        GORGE_ENV_FILE="/dev/null",
        SECRET_KEY="bench-only-" + secrets.token_hex(24),
        DATABASE_URL=f"sqlite:///{workdir / 'site.sqlite3'}",
        DJANGO_SETTINGS_MODULE="gorge_site.settings",
        GORGE_WEBHOOK_DATABASE_URL=database_url(database),
        GORGE_WEBHOOK_OUTBOUND_BLACKLIST="",
        GORGE_WEBHOOK_SILENT="false",
        PYTHONUNBUFFERED="1",
    )
    return env


def migrate(env: dict[str, str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(
            [PYTHON, "manage.py", "migrate", "--verbosity", "0"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
            check=False,
        )
    if done.returncode != 0:
        raise BenchError(f"manage.py migrate failed, see {log}")


@dataclass(frozen=True)
class Exit:
    returncode: int
    wall: float
    max_rss_mb: float
    cpu_seconds: float
    system_seconds: float


class WorkerProcess:
    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.env = env
        self.log = log
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self._exit: Exit | None = None
        self._reaper: threading.Thread | None = None

    def start(self) -> WorkerProcess:
        with self.log.open("ab") as out:
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                [PYTHON, "manage.py", "deliver_webhooks", *self.args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._reaper = threading.Thread(target=self._reap, daemon=True)
        self._reaper.start()
        return self

    def _reap(self) -> None:
        assert self.proc is not None
        _, status, usage = os.wait4(self.proc.pid, 0)
        ended = time.monotonic()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._exit = Exit(
            returncode=self.proc.returncode,
            wall=ended - self.started,
            max_rss_mb=usage.ru_maxrss / 1024,  # KiB on Linux
            cpu_seconds=usage.ru_utime + usage.ru_stime,
            system_seconds=usage.ru_stime,
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self._exit is None

    def signal(self, signum: int) -> None:
        if self.running():
            os.kill(self.pid, signum)

    def wait(self, timeout: float) -> Exit:
        assert self._reaper is not None
        self._reaper.join(timeout)
        if self._exit is None:
            self.kill()
            command = " ".join(self.args)
            raise BenchError(f"deliver_webhooks {command} did not finish in {timeout:.0f} s, see {self.log}")
        return self._exit

    def kill(self) -> None:
        if self.proc is not None and self.running():
            os.kill(self.proc.pid, signal.SIGKILL)
            if self._reaper is not None:
                self._reaper.join(10)

    def wait_for_log(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text(errors="replace"):
            if not self.running() or time.monotonic() > deadline:
                raise BenchError(f"deliver_webhooks never logged {text!r}, see {self.log}")
            time.sleep(0.05)
