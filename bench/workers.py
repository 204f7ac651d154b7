"""deliver_webhooks as real processes: environment, wall time, exit status and CPU from wait4(), peak RSS
from the process's own high-water mark (PeakRss)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import PYTHON, TREE, BenchError, database_url


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
            cwd=TREE,
            env=env,
            stdout=out,
            stderr=out,
            check=False,
        )
    if done.returncode != 0:
        raise BenchError(f"manage.py migrate failed, see {log}")


class PeakRss:
    """The peak resident memory of a running process, from its own address space (VmHWM), sampled until it
    ends. Not wait4()'s ru_maxrss: Linux carries the RSS the parent had when it forked the process into that
    figure, so a worker started by a bench grown to 116 MB reported 116 MB, whatever it used itself."""

    EVERY_SEC = 0.02

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.kib = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        path = Path(f"/proc/{self.pid}/status")
        while not self._done.is_set():
            try:
                for line in path.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.kib = max(self.kib, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            self._done.wait(self.EVERY_SEC)

    def stop(self, fallback_kib: int) -> float:
        """MB, once the process has ended (ru_maxrss when it ended before the first sample)."""
        self._done.set()
        self._thread.join()
        return (self.kib or fallback_kib) / 1024


@dataclass(frozen=True)
class Exit:
    returncode: int
    wall: float
    max_rss_mb: float
    cpu_seconds: float
    system_seconds: float


class WorkerProcess:
    def __init__(self, env: dict[str, str], log: Path, *args: str, cpu: int | None = None) -> None:
        self.env = env
        self.log = log
        self.args = args
        self.cpu = cpu  # run on that one core only (taskset), as a deployment that gives each worker a core
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self._exit: Exit | None = None
        self._reaper: threading.Thread | None = None

    def start(self) -> WorkerProcess:
        with self.log.open("ab") as out:
            self.started = time.monotonic()
            pinned = [] if self.cpu is None else ["taskset", "-c", str(self.cpu)]
            self.proc = subprocess.Popen(
                [*pinned, PYTHON, "manage.py", "deliver_webhooks", *self.args],
                cwd=TREE,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._reaper = threading.Thread(target=self._reap, args=(PeakRss(self.proc.pid),), daemon=True)
        self._reaper.start()
        return self

    def _reap(self, peak: PeakRss) -> None:
        assert self.proc is not None
        _, status, usage = os.wait4(self.proc.pid, 0)
        ended = time.monotonic()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._exit = Exit(
            returncode=self.proc.returncode,
            wall=ended - self.started,
            max_rss_mb=peak.stop(usage.ru_maxrss),  # KiB on Linux
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
