"""The measurements. Each returns figures (name -> number) and appends a correctness Check per worker run."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3

from bench.common import PYTHON, BenchError, connect, percentile, process_cpu_seconds
from bench.common import mariadb_pid as read_mariadb_pid
from bench.herald import HeraldDB, Hook, Request, ensure_history
from bench.receivers import Hit, Receiver
from bench.workers import Exit, WorkerProcess, worker_env

DRAIN_TIMEOUT_SEC = 600.0
READY_LINE = "deliver_webhooks started"


@dataclass
class Sizes:
    requests: int
    single_hook: int
    latency_sec: float
    idle_polls: int
    history_rows: int  # 0 skips the retained-history part
    bare_sec: float


@dataclass(frozen=True)
class Check:
    label: str
    expected: int
    sent: int
    received: int
    duplicates: int
    lost: int
    unexpected: int
    db_other: dict[str, int]

    @property
    def ok(self) -> bool:
        return (
            self.sent == self.expected
            and self.received == self.expected
            and not (self.duplicates or self.lost or self.unexpected or self.db_other)
        )

    def line(self) -> str:
        other = f", other rows {self.db_other}" if self.db_other else ""
        extra = f", {self.unexpected} unexpected" if self.unexpected else ""
        return (
            f"{self.label}: {self.sent} sent of {self.expected}, receiver {self.received} unique, "
            f"{self.duplicates} duplicates, {self.lost} lost{extra}{other}"
        )


@dataclass
class Context:
    workdir: Path
    receiver: Receiver
    db: HeraldDB
    sizes: Sizes
    log: Callable[[str], None]
    mariadb_pid: int | None
    history_db: str
    repetition: int = 0
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _runs: int = 0

    def tag(self, name: str) -> str:
        self._runs += 1
        return f"/r{self.repetition}-{self._runs}-{name}/"

    def worker(self, database: str, name: str, *args: str) -> WorkerProcess:
        self._runs += 1
        log = self.workdir / f"worker-r{self.repetition}-{self._runs}-{name}.log"
        return WorkerProcess(worker_env(self.workdir, database), log, *args)


class CpuMeter:
    """CPU seconds the database server and the receiver spend during a run (both are on this machine)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.db0 = self._db()
        self.rx0 = ctx.receiver.cpu_seconds()

    def _db(self) -> float:
        pid = self.ctx.mariadb_pid
        return (process_cpu_seconds(pid) or 0.0) if pid else 0.0

    def per_request_ms(self, count: int) -> tuple[float, float]:
        return (
            (self._db() - self.db0) * 1000 / max(1, count),
            (self.ctx.receiver.cpu_seconds() - self.rx0) * 1000 / max(1, count),
        )


def exactly_once(label: str, outcomes: dict[tuple[str, str], int], seeded: list[Request], hits: list[Hit]) -> Check:
    """Compare what was seeded with the database outcomes (status, result) and what the receiver logged."""
    expected = {request.signature() for request in seeded}
    counts = Counter(hit.signature for hit in hits if hit.status == 200)
    outcomes = dict(outcomes)
    sent = outcomes.pop(("sent", "okay"), 0)
    return Check(
        label=label,
        expected=len(seeded),
        sent=sent,
        received=sum(1 for signature in counts if signature in expected),
        duplicates=sum(n - 1 for signature, n in counts.items() if signature in expected and n > 1),
        lost=sum(1 for signature in expected if signature not in counts),
        unexpected=sum(n for signature, n in counts.items() if signature not in expected)
        + sum(1 for hit in hits if hit.status != 200),
        db_other={f"{status}/{result}": n for (status, result), n in outcomes.items()},
    )


def verify(ctx: Context, label: str, db: HeraldDB, seeded: list[Request], hits: list[Hit], above_id: int) -> Check:
    """Exactly once, from both ends: every seeded row `sent` in the database, every body received once."""
    check = exactly_once(label, db.outcome_counts(above_id=above_id), seeded, hits)
    ctx.checks.append(check)
    if not check.ok:
        ctx.log(f"CORRECTNESS FAILURE: {check.line()}")
    return check


def _exit_ok(worker: WorkerProcess, result: Exit) -> None:
    if result.returncode != 0:
        raise BenchError(f"deliver_webhooks exited {result.returncode}, see {worker.log}")


def _span_rate(hits: list[Hit]) -> float:
    if len(hits) < 2:
        return 0.0
    times = [hit.at for hit in hits]
    return (len(hits) - 1) / max(0.001, max(times) - min(times))


# -- 1. the bare client ------------------------------------------------------------------------------------


def bare_client(ctx: Context, sample: Request) -> dict[str, float]:
    """requests.Session, one thread, the same body and headers to the same receiver: the reference rate.

    urllib3's pool and http.client, measured the same way, show what the layers under requests cost.
    """
    body = sample.body()
    headers = {
        "Content-Type": "application/json",
        "X-Phabricator-Webhook-Signature": sample.signature(),
        "User-Agent": "Arcanist/1.0 cURL/7.88.1",
        "Accept": "*/*",
        "Accept-Encoding": "gzip",
    }
    path = ctx.tag("bare") + "x"
    url = ctx.receiver.url(path)
    figures = {"body_bytes": float(len(body))}
    with requests.Session() as session:

        def with_requests() -> int:
            return int(session.post(url, data=body, headers=headers).status_code)

        figures["bare_rate"] = _rate(with_requests, ctx.sizes.bare_sec)
    pool = urllib3.HTTPConnectionPool("127.0.0.1", ctx.receiver.port, maxsize=1, retries=False)

    def with_urllib3() -> int:
        response = pool.urlopen("POST", path, body=body, headers=headers, preload_content=False)
        while response.read(65536, decode_content=False):
            pass
        response.release_conn()
        return int(response.status)

    figures["urllib3_rate"] = _rate(with_urllib3, ctx.sizes.bare_sec / 2)
    pool.close()
    connection = http.client.HTTPConnection("127.0.0.1", ctx.receiver.port)

    def with_http_client() -> int:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return int(response.status)

    figures["http_client_rate"] = _rate(with_http_client, ctx.sizes.bare_sec / 2)
    connection.close()
    return figures


def _rate(post: Callable[[], int], seconds: float) -> float:
    """Posts per second of one thread over `seconds`, after a warm-up."""
    for _ in range(100):
        if post() != 200:
            raise BenchError("the receiver does not answer 200 to the reference clients")
    sent = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(50):
            if post() != 200:
                raise BenchError("the receiver does not answer 200 to the reference clients")
        sent += 50
    return sent / (time.perf_counter() - started)


# -- 2, 3, 4, 7. draining a backlog ------------------------------------------------------------------------


def drain(
    ctx: Context,
    name: str,
    *,
    hooks: int,
    count: int,
    processes: int = 1,
    max_concurrent: int = 16,
) -> dict[str, float]:
    """`count` queued rows over `hooks` hooks, drained by `processes` x `deliver_webhooks --once`."""
    db = ctx.db
    db.clear()
    tag = ctx.tag(name)
    hook_rows = [db.add_hook(ctx.receiver.url(f"{tag}h{i}")) for i in range(hooks)]
    seeded = db.seed(hook_rows, count)
    meter = CpuMeter(ctx)
    workers = [
        ctx.worker(db.name, f"{name}-{i}", "--once", "--max-concurrent", str(max_concurrent)) for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    exits = [worker.wait(DRAIN_TIMEOUT_SEC) for worker in workers]
    for worker, result in zip(workers, exits, strict=True):
        _exit_ok(worker, result)
    wall = max(w.started + e.wall for w, e in zip(workers, exits, strict=True)) - min(w.started for w in workers)
    db_ms, rx_ms = meter.per_request_ms(count)
    hits = ctx.receiver.hits(tag, expected=count)
    verify(ctx, name, db, seeded, hits, above_id=0)
    return {
        f"{name}_rate": count / wall,
        f"{name}_span_rate": _span_rate(hits),
        f"{name}_wall": wall,
        f"{name}_cpu_ms": sum(e.cpu_seconds for e in exits) * 1000 / count,
        f"{name}_sys_pct": 100 * sum(e.system_seconds for e in exits) / max(0.001, sum(e.cpu_seconds for e in exits)),
        f"{name}_db_cpu_ms": db_ms,
        f"{name}_rx_cpu_ms": rx_ms,
        f"{name}_rss_mb": max(e.max_rss_mb for e in exits),
    }


# -- 5. latency --------------------------------------------------------------------------------------------


def latency(ctx: Context, *, rate: float = 20.0, hooks: int = 16) -> dict[str, float]:
    """A long-running worker at defaults; Phorge inserts one row every 1/rate s; receiver time - insert time."""
    db = ctx.db
    db.clear()
    tag = ctx.tag("latency")
    hook_rows = [db.add_hook(ctx.receiver.url(f"{tag}h{i}")) for i in range(hooks)]
    worker = ctx.worker(db.name, "latency").start()
    try:
        worker.wait_for_log(READY_LINE, 30)
        warm = db.seed(hook_rows, 5)
        _wait_all_sent(db, len(warm), 30)
        inserter = HeraldDB(db.name)
        try:
            inserted = _insert_steadily(inserter, hook_rows, rate, ctx.sizes.latency_sec)
        finally:
            inserter.close()
        _wait_all_sent(db, len(warm) + len(inserted), 60)
        worker.signal(signal.SIGTERM)
        _exit_ok(worker, worker.wait(60))
    finally:
        worker.kill()
    hits = ctx.receiver.hits(tag, expected=len(warm) + len(inserted))
    verify(ctx, "latency", db, [*warm, *(request for request, _ in inserted)], hits, above_id=0)
    received = {hit.signature: hit.at for hit in hits}
    latencies = [
        (received[request.signature()] - at) * 1000 for request, at in inserted if request.signature() in received
    ]
    if not latencies:
        raise BenchError("latency run delivered nothing")
    return {
        "lat_p50": percentile(latencies, 50),
        "lat_p95": percentile(latencies, 95),
        "lat_p99": percentile(latencies, 99),
        "lat_max": max(latencies),
        "lat_n": float(len(latencies)),
    }


def _insert_steadily(db: HeraldDB, hooks: list[Hook], rate: float, seconds: float) -> list[tuple[Request, float]]:
    """One row at a time on a fixed schedule (no drift), each stamped with the wall clock before its INSERT."""
    inserted = []
    interval = 1.0 / rate
    count = int(seconds * rate)
    started = time.monotonic()
    for i in range(count):
        pause = started + i * interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        at = time.time()
        request = db.new_request(hooks[i % len(hooks)], int(at))
        db.insert([request])
        inserted.append((request, at))
    return inserted


def _wait_all_sent(db: HeraldDB, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while db.outcome_counts().get(("sent", "okay"), 0) < count:
        if time.monotonic() > deadline:
            raise BenchError(f"{count} requests not delivered within {timeout:.0f} s: {db.outcome_counts()}")
        time.sleep(0.02)


# -- 6. retained history -----------------------------------------------------------------------------------


def drain_with_stuck_request(
    ctx: Context, db: HeraldDB, name: str, *, tag: str, hooks: list[Hook], stuck_id: int, above_id: int
) -> tuple[float, float]:
    """Drain N rows of `hooks` while the broken hook's old request stays queued at the low-id end."""
    count = ctx.sizes.requests
    db.refresh_stuck_request(stuck_id)
    seeded = db.seed(hooks, count)
    worker = ctx.worker(db.name, name, "--once", "--max-concurrent", "16").start()
    result = worker.wait(DRAIN_TIMEOUT_SEC)
    _exit_ok(worker, result)
    hits = ctx.receiver.hits(tag, expected=count)
    verify(ctx, name, db, seeded, hits, above_id=above_id)
    stuck = db.execute("SELECT status, lastRequestResult FROM herald_webhookrequest WHERE id = %s", (stuck_id,))
    if [tuple(v.decode() if isinstance(v, bytes) else v for v in row) for row in stuck] != [("queued", "fail")]:
        raise BenchError(f"{name}: the broken hook's request changed: {stuck}")
    if ctx.receiver.hits(f"/fail{tag}", timeout=0):
        ctx.notes.append(f"{name}: the broken hook was called during the drain (its retry backoff ran out)")
    return result.wall, _span_rate(hits)


def history(ctx: Context) -> dict[str, float]:
    """Drain time and idle poll cost on an empty history and on `history_rows` retained sent rows."""
    figures: dict[str, float] = {}
    empty = ctx.db
    empty.clear()
    tag = ctx.tag("empty-history")
    broken = empty.add_hook(ctx.receiver.url(f"/fail{tag}x"), name="broken")
    stuck_id = empty.add_stuck_request(broken, created=empty.now() - 7 * 86400)
    hooks = [empty.add_hook(ctx.receiver.url(f"{tag}h{i}")) for i in range(16)]
    wall, span = drain_with_stuck_request(
        ctx, empty, "drain-empty", tag=tag, hooks=hooks, stuck_id=stuck_id, above_id=stuck_id
    )
    figures.update(drain_empty=wall, drain_empty_span_rate=span)
    figures.update({f"empty_{k}": v for k, v in idle_poll(ctx, empty.name).items()})

    if ctx.sizes.history_rows:
        # Two benches at once would trample each other's cached history: take turns.
        guard = connect()
        guard.cursor().execute("SELECT GET_LOCK(%s, 1800)", (f"bench:{ctx.history_db}",))
        try:
            figures.update(_with_history(ctx, figures["drain_empty"]))
        finally:
            guard.close()
    return figures


def _with_history(ctx: Context, drain_empty: float) -> dict[str, float]:
    figures: dict[str, float] = {}
    big = ensure_history(ctx.history_db, ctx.sizes.history_rows, log=ctx.log)
    if big.built_now:
        ctx.notes.append(f"built {ctx.history_db} in {big.build_seconds:.0f} s (reused by later runs)")
    tag = ctx.tag("1m-history")
    hooks = [big.db.set_hook_uri(hook.phid, ctx.receiver.url(f"{tag}h{i}")) for i, hook in enumerate(big.hooks)]
    big.db.set_hook_uri(big.broken.phid, ctx.receiver.url(f"/fail{tag}x"))
    try:
        wall, span = drain_with_stuck_request(
            ctx, big.db, "drain-1m", tag=tag, hooks=hooks, stuck_id=big.stuck_id, above_id=big.base_max_id
        )
        figures.update(drain_1m=wall, drain_1m_span_rate=span, drain_ratio=wall / drain_empty)
        figures.update({f"big_{k}": v for k, v in idle_poll(ctx, big.db.name).items()})
    finally:
        big.db.execute("DELETE FROM herald_webhookrequest WHERE id > %s", (big.base_max_id,))
        big.db.close()
    return figures


def idle_poll(ctx: Context, database: str) -> dict[str, float]:
    env = worker_env(ctx.workdir, database)
    script = Path(__file__).with_name("idle_poll.py")
    done = subprocess.run(
        [PYTHON, str(script), str(ctx.sizes.idle_polls)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise BenchError(f"idle poll measurement failed: {done.stderr[-2000:]}")
    values: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {key: float(value) for key, value in values.items()}


def mariadb_pid() -> int | None:
    connection = connect()
    try:
        return read_mariadb_pid(connection.cursor())
    finally:
        connection.close()
