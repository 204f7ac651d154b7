"""The measurements. Each returns figures (name -> number) and appends a correctness Check per worker run."""

from __future__ import annotations

import http.client
import json
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3

from bench.common import PYTHON, TREE, BenchError, connect, percentile, process_cpu_seconds, process_status, tcp_ports
from bench.common import mariadb_pid as read_mariadb_pid
from bench.herald import (
    HeraldDB,
    Hook,
    Request,
    ensure_backlog,
    ensure_history,
    requests_with_status,
    reset_backlog,
)
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
    dead_hooks: int = 100
    dead_head_start_sec: float = 20.0
    healthy_sec: float = 60.0
    dead_timeout: str = ""  # "": the default delivery timeout (15 s)
    backlog_rows: int = 1_000_000
    backlog_window_sec: float = 30.0
    small_queue: int = 6000
    many_hooks: int = 300
    many_in_flight: int = 256
    page_sizes: tuple[int, int] = (100_000, 1_000_000)  # figure 12: retained requests, and as many attempts
    page_rounds: int = 7
    page_turns: int = 3  # each size measured this many times, the sizes taking turns


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
    hang: Receiver | None = None
    backlog_db: str = ""
    repetition: int = 0
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _runs: int = 0

    def tag(self, name: str) -> str:
        self._runs += 1
        return f"/r{self.repetition}-{self._runs}-{name}/"

    def worker(self, database: str, name: str, *args: str, cpu: int | None = None, **env: str) -> WorkerProcess:
        self._runs += 1
        log = self.workdir / f"worker-r{self.repetition}-{self._runs}-{name}.log"
        return WorkerProcess({**worker_env(self.workdir, database), **env}, log, *args, cpu=cpu)


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
    max_concurrent: int = 32,
    env: dict[str, str] | None = None,
    cpu: int | None = None,
) -> dict[str, float]:
    """`count` queued rows over `hooks` hooks, drained by `processes` x `deliver_webhooks --once`. 32 in flight
    by default: room for 16 hooks none of which has answered yet (the lanes give those three quarters)."""
    db = ctx.db
    db.clear()
    tag = ctx.tag(name)
    hook_rows = [db.add_hook(ctx.receiver.url(f"{tag}h{i}")) for i in range(hooks)]
    seeded = db.seed(hook_rows, count)
    logged_before = attempts_logged(ctx)
    meter = CpuMeter(ctx)
    workers = [
        ctx.worker(db.name, f"{name}-{i}", "--once", "--max-concurrent", str(max_concurrent), cpu=cpu, **(env or {}))
        for i in range(processes)
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
        f"{name}_logged_pct": 100 * (attempts_logged(ctx) - logged_before) / count,
    }


def attempts_logged(ctx: Context) -> int:
    """Rows in the workers' attempt log (Django's database of the bench: a SQLite file)."""
    with sqlite3.connect(ctx.workdir / "site.sqlite3") as connection:
        return int(connection.execute("SELECT COUNT(*) FROM delivery_status_deliveryattempt").fetchone()[0])


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


def idle_database_cost(ctx: Context, seconds: float) -> dict[str, float]:
    """Statements per second one worker at defaults sends MariaDB with nothing arriving (Questions counter;
    the bench's own connections are idle meanwhile)."""
    db = ctx.db
    db.clear()
    worker = ctx.worker(db.name, "idle").start()

    def questions() -> int:
        with db.cursor() as cursor:
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
            return int(cursor.fetchone()[1])

    try:
        worker.wait_for_log(READY_LINE, 30)
        time.sleep(QUICK_SETTLE_SEC)  # past any quick polling after start-up
        before, started = questions(), time.monotonic()
        time.sleep(seconds)
        after, elapsed = questions(), time.monotonic() - started
        worker.signal(signal.SIGTERM)
        _exit_ok(worker, worker.wait(60))
    finally:
        worker.kill()
    return {"idle_statements_per_sec": (after - before - 1) / elapsed}


def database_cost(ctx: Context, count: int, idle_sec: float) -> dict[str, float]:
    """What Phorge's database pays for the worker, told apart from every other client: the worker as a
    MariaDB user of its own with only its grants, counted by MariaDB's `userstat` (bench/dbcost.py). A drain
    of `count` over 16 hooks at --max-concurrent 16 (statements, rows read and server CPU per delivery), then
    one idle worker at defaults (the same per second)."""
    from bench.dbcost import WorkerUser

    db = ctx.db
    with WorkerUser(db.name) as user:
        own = {"GORGE_WEBHOOK_DATABASE_URL": user.url}
        user.reset()
        drain(ctx, "dbcost", hooks=16, count=count, env=own)
        busy = user.cost().per(count)
        db.clear()
        worker = ctx.worker(db.name, "dbcost-idle", **own).start()
        try:
            worker.wait_for_log(READY_LINE, 30)
            time.sleep(QUICK_SETTLE_SEC)  # past any quick polling after start-up
            user.reset()
            started = time.monotonic()
            time.sleep(idle_sec)
            idle = user.cost().per(time.monotonic() - started)
            worker.signal(signal.SIGTERM)
            _exit_ok(worker, worker.wait(60))
        finally:
            worker.kill()
    return {
        "db_statements_per_delivery": busy.statements,
        "db_rows_per_delivery": busy.rows_read,
        "db_cpu_ms_per_delivery": busy.cpu_sec * 1000,
        "db_deliveries_per_core": 1 / busy.cpu_sec if busy.cpu_sec else 0.0,
        "db_idle_statements_per_sec": idle.statements,
        "db_idle_rows_per_sec": idle.rows_read,
        "db_idle_cpu_ms_per_sec": idle.cpu_sec * 1000,
        "db_idle_workers_per_core": 1 / idle.cpu_sec if idle.cpu_sec else 0.0,
    }


QUICK_SETTLE_SEC = 3.0


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
    if not (TREE / "webhook_delivery" / "worker" / "window.py").exists():
        return {}  # a tree from before the queue window (bench/compare.py with an old BASE): no such figures
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


# -- 8. dead neighbours ------------------------------------------------------------------------------------


def dead_neighbours(ctx: Context) -> dict[str, float]:
    """Hooks whose receiver accepts and never answers, each with 20 queued `retry=forever` requests; after
    a head start a healthy hook gets 10 new requests per second. One long-running process at defaults."""
    assert ctx.hang is not None
    db = ctx.db
    db.clear()
    tag = ctx.tag("dead")
    dead = [db.add_hook(ctx.hang.url(f"/dead{tag}h{i}/x"), name=f"dead {i}") for i in range(ctx.sizes.dead_hooks)]
    db.seed(dead, 20 * len(dead))
    above = int(db.execute("SELECT COALESCE(MAX(id), 0) FROM herald_webhookrequest")[0][0])
    healthy = db.add_hook(ctx.receiver.url(f"{tag}healthy"), name="healthy")
    env = {"GORGE_WEBHOOK_DELIVERY_TIMEOUT": ctx.sizes.dead_timeout} if ctx.sizes.dead_timeout else {}
    worker = ctx.worker(db.name, "dead-neighbours", **env).start()
    try:
        worker.wait_for_log(READY_LINE, 30)
        time.sleep(ctx.sizes.dead_head_start_sec)
        inserter = HeraldDB(db.name)
        try:
            inserted = _insert_steadily(inserter, [healthy], 10.0, ctx.sizes.healthy_sec)
        finally:
            inserter.close()
        deadline = time.monotonic() + 60
        while db.outcome_counts(above_id=above).get(("sent", "okay"), 0) < len(inserted):
            if time.monotonic() > deadline:
                raise BenchError(f"the healthy hook's requests were not delivered: {db.outcome_counts(above_id=above)}")
            time.sleep(0.05)
        tried = {hit.path.rsplit("/", 1)[0] for hit in ctx.hang.hits(f"/dead{tag}", timeout=0)}
        worker.signal(signal.SIGTERM)
        _exit_ok(worker, worker.wait(120))
    finally:
        worker.kill()
    hits = ctx.receiver.hits(f"{tag}healthy", expected=len(inserted))
    verify(ctx, "dead-neighbours (healthy hook)", db, [request for request, _ in inserted], hits, above_id=above)
    attempts = Counter(hit.signature for hit in ctx.hang.hits(f"/dead{tag}", timeout=0))
    if any(n > 1 for n in attempts.values()):
        raise BenchError("a dead hook's request was attempted twice within its retry backoff")
    received = {hit.signature: hit.at for hit in hits}
    latencies = [(received[r.signature()] - at) * 1000 for r, at in inserted if r.signature() in received]
    return {
        "dead_p50": percentile(latencies, 50),
        "dead_p99": percentile(latencies, 99),
        "dead_max": max(latencies),
        "dead_tried_pct": 100 * len(tried) / len(dead),
        "dead_attempts": float(sum(attempts.values())),
    }


# -- 9. a backlog after an outage --------------------------------------------------------------------------


def _first_and_rate(hits: list[Hit], started_at: float) -> tuple[float, float]:
    times = sorted(hit.at for hit in hits)
    if not times:
        raise BenchError("nothing was delivered")
    return times[0] - started_at, (len(times) - 1) / max(0.001, times[-1] - times[0])


def backlog(ctx: Context) -> dict[str, float]:
    """A small queue over 100 hooks, then `backlog_rows` queued due requests over 100 hooks: time to the
    first delivery, drain rate over a window, peak memory. Long-running processes at defaults."""
    db = ctx.db
    db.clear()
    tag = ctx.tag("small-queue")
    hooks = [db.add_hook(ctx.receiver.url(f"{tag}h{i}")) for i in range(100)]
    seeded = db.seed(hooks, ctx.sizes.small_queue)
    started_at = time.time()
    worker = ctx.worker(db.name, "small-queue").start()
    try:
        _wait_all_sent(db, len(seeded), 300)
        worker.signal(signal.SIGTERM)
        small_exit = worker.wait(60)
        _exit_ok(worker, small_exit)
    finally:
        worker.kill()
    hits = ctx.receiver.hits(tag, expected=len(seeded))
    verify(ctx, "small queue, 100 hooks", db, seeded, hits, above_id=0)
    small_first, small_rate = _first_and_rate(hits, started_at)

    big = ensure_backlog(ctx.backlog_db, ctx.sizes.backlog_rows, log=ctx.log)
    if big.built_now:
        ctx.notes.append(f"built {ctx.backlog_db} in {big.build_seconds:.0f} s")
    tag = ctx.tag("backlog")
    for i, hook in enumerate(big.hooks):
        big.db.set_hook_uri(hook.phid, ctx.receiver.url(f"{tag}h{i}"))
    started_at = time.time()
    worker = ctx.worker(big.db.name, "backlog").start()
    try:
        deadline = time.monotonic() + 60
        while not ctx.receiver.hits(tag, timeout=0):
            if not worker.running() or time.monotonic() > deadline:
                raise BenchError(f"nothing delivered from the backlog, see {worker.log}")
            time.sleep(0.05)
        time.sleep(ctx.sizes.backlog_window_sec)
        worker.signal(signal.SIGTERM)
        big_exit = worker.wait(60)
        _exit_ok(worker, big_exit)
    finally:
        worker.kill()
    try:
        delivered = requests_with_status(big.db, "sent")
        hits = ctx.receiver.hits(tag, expected=len(delivered))
        check = exactly_once("backlog (delivered part)", {("sent", "okay"): len(delivered)}, delivered, hits)
        ctx.checks.append(check)
        if not check.ok:
            ctx.log(f"CORRECTNESS FAILURE: {check.line()}")
        first, rate = _first_and_rate(hits, started_at)
    finally:
        reset_backlog(big.db)
        big.db.close()
    return {
        "small_first_s": small_first,
        "small_rate": small_rate,
        "small_rss_mb": small_exit.max_rss_mb,
        "backlog_first_s": first,
        "backlog_rate": rate,
        "backlog_rate_pct": 100 * rate / small_rate,
        "backlog_rss_mb": big_exit.max_rss_mb,
    }


# -- 10. many deliveries in flight ---------------------------------------------------------------------------


def many_in_flight(ctx: Context) -> dict[str, float]:
    """`many_hooks` hooks whose receiver answers after a second, `--max-concurrent many_in_flight`: how many
    connections to Phorge's database the process holds, its threads and memory, at the peak. Every hook
    answers once first, so that all of the capacity is theirs (new hooks get three quarters of it)."""
    assert ctx.hang is not None
    db = ctx.db
    db.clear()
    tag = ctx.tag("many")
    prefix = f"/slow1000{tag}"
    hooks = [db.add_hook(ctx.hang.url(f"{prefix}h{i}/x")) for i in range(ctx.sizes.many_hooks)]
    seeded = db.seed(hooks, len(hooks))
    worker = ctx.worker(db.name, "many", "--max-concurrent", str(ctx.sizes.many_in_flight)).start()
    peak = {"in_flight": 0.0, "connections": 0.0, "rss_mb": 0.0, "threads": 0.0}
    try:
        _wait_all_sent(db, len(seeded), 120)
        seeded += db.seed(hooks, 2 * len(hooks))
        deadline = time.monotonic() + 300
        while db.outcome_counts().get(("sent", "okay"), 0) < len(seeded):
            if not worker.running() or time.monotonic() > deadline:
                raise BenchError(f"the many-in-flight run did not finish, see {worker.log}")
            arrived = ctx.hang.hits(prefix, timeout=0)
            in_flight = sum(1 for hit in arrived if hit.status == 0) - sum(1 for hit in arrived if hit.status == 200)
            ports = tcp_ports(worker.pid)
            sessions = db.execute("SELECT HOST FROM information_schema.PROCESSLIST WHERE DB = %s", (db.name,))
            held = sum(1 for (host,) in sessions if ":" in str(host) and int(str(host).rsplit(":", 1)[1]) in ports)
            status = process_status(worker.pid)
            if in_flight >= peak["in_flight"]:
                peak["in_flight"] = float(in_flight)
                peak["threads"] = float(status.get("Threads", "0"))
            peak["connections"] = max(peak["connections"], float(held))
            peak["rss_mb"] = max(peak["rss_mb"], float(status.get("VmRSS", "0 kB").split()[0]) / 1024)
            time.sleep(0.1)
        worker.signal(signal.SIGTERM)
        _exit_ok(worker, worker.wait(60))
    finally:
        worker.kill()
    hits = [hit for hit in ctx.hang.hits(prefix, timeout=0) if hit.status == 200]
    verify(ctx, "many in flight", db, seeded, hits, above_id=0)
    return {f"many_{key}": value for key, value in peak.items()}
