"""`make bench`: how fast deliver_webhooks is on this machine, next to their targets.

    .venv/bin/python bench/run.py [--quick] [--smoke] [--repeat K] [--receiver auto|nginx|python]

Sets up its own herald database (`gwbench_herald`, Phorge's DDL from webhook_delivery/sql/schema.sql) on the
test MariaDB, a local receiver (Debian's nginx, `return 200`; a Python one if nginx is missing), runs real
`manage.py deliver_webhooks` processes and prints one table: medians over K repetitions, each figure next
to its target. It is a report, not a test: slow figures are marked MISS and the exit status stays 0; a
lost or duplicated request (checked from the database and from the receiver) or a broken step exits 1.

The one-million-row history lives in its own database (`gwbench1m_herald`), built on first use (a few
minutes) and reused while it holds exactly the expected rows; `--drop-history` removes it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import pages, scenarios
from bench.common import ROOT, TREE, BenchError, machine_busy_fraction, median
from bench.herald import HeraldDB, Hook
from bench.receivers import make_receiver
from bench.scenarios import Context, Sizes
from bench.workers import migrate, worker_env

HISTORY_ROWS = 1_000_000


@dataclass(frozen=True)
class Row:
    label: str
    key: str
    unit: str
    target: str = ""
    passes: Callable[[float], bool] | None = None
    digits: int = 0


ROWS = [
    Row("1. bare client: requests.Session, 1 thread, same body", "bare_rate", "/s", "reference"),
    Row("   (urllib3 pool, 1 thread, same body)", "urllib3_rate", "/s"),
    Row("   (http.client, 1 thread, same body)", "http_client_rate", "/s"),
    Row("2. one process, 16 hooks, --max-concurrent 32 (N / wall)", "one_rate", "/s", ">= 600/s", lambda v: v >= 600),
    Row("   ... as % of the bare client (same run)", "one_pct", "%", ">= 45%", lambda v: v >= 45),
    Row("   ... first to last delivery at the receiver", "one_span_rate", "/s"),
    Row("   ... that, as % of the bare client (same run)", "one_span_pct", "%", ">= 90%", lambda v: v >= 90),
    Row("   ... worker CPU per delivery (user + system)", "one_cpu_ms", "ms", digits=2),
    Row("   ... of which system (kernel) time", "one_sys_pct", "%"),
    Row("   ... MariaDB CPU per delivery", "one_db_cpu_ms", "ms", digits=2),
    Row("   ... receiver CPU per delivery", "one_rx_cpu_ms", "ms", digits=3),
    Row("   ... attempts recorded in the attempt log", "one_logged_pct", "%", "100%", lambda v: v >= 100),
    Row("   the same with the attempt log off (N / wall)", "nolog_rate", "/s"),
    Row("   ... its worker CPU per delivery", "nolog_cpu_ms", "ms", digits=2),
    Row("   ... log on as % of log off (same run)", "log_pct", "%", ">= 90%", lambda v: v >= 90),
    Row("   the same on one core (taskset -c, as CPUAffinity= deploys it)", "pinned_span_rate", "/s"),
    Row("   ... that, as % of the bare client (same run)", "pinned_span_pct", "%", ">= 90%", lambda v: v >= 90),
    Row("   ... its worker CPU per delivery", "pinned_cpu_ms", "ms", digits=2),
    Row("3. one hook, one call in flight (N / wall)", "single_rate", "/s", ">= 300/s", lambda v: v >= 300),
    Row("   ... first to last delivery at the receiver", "single_span_rate", "/s"),
    Row("   ... that, as % of the bare client (same run)", "single_span_pct", "%", ">= 60%", lambda v: v >= 60),
    Row("   ... worker CPU per delivery", "single_cpu_ms", "ms", digits=2),
    Row("4. two processes together, 16 hooks (N / wall)", "two_rate", "/s"),
    Row("   ... first to last delivery at the receiver", "two_span_rate", "/s"),
    Row("   ... worker CPU per delivery (both processes)", "two_cpu_ms", "ms", digits=2),
    Row("   ... MariaDB CPU per delivery", "two_db_cpu_ms", "ms", digits=2),
    Row("5. latency p50, 20 inserts/s, defaults", "lat_p50", "ms", "<= 150 ms", lambda v: v <= 150),
    Row("   latency p95", "lat_p95", "ms"),
    Row("   latency p99", "lat_p99", "ms", "<= 300 ms", lambda v: v <= 300),
    Row("   latency max", "lat_max", "ms"),
    Row("   idle: statements/s one worker sends MariaDB, nothing arriving", "idle_statements_per_sec", "/s", digits=1),
    Row("6. drain N, empty history + 1 stuck request", "drain_empty", "s", digits=2),
    Row("   drain N, 1M retained sent rows + 1 stuck request", "drain_1m", "s", digits=2),
    Row("   ... ratio 1M / empty", "drain_ratio", "x", "<= 1.2x", lambda v: v <= 1.2, digits=2),
    Row(
        "   idle QueueWindow.poll(), empty history (median)",
        "empty_poll_median_ms",
        "ms",
        "< 1 ms",
        lambda v: v < 1,
        digits=3,
    ),
    Row(
        "   idle QueueWindow.poll(), 1M rows (median)", "big_poll_median_ms", "ms", "< 1 ms", lambda v: v < 1, digits=3
    ),
    Row("   idle poll p99, 1M rows", "big_poll_p99_ms", "ms", digits=3),
    Row("   safety sweep, 1M rows (start-up, then every 600 s)", "big_sweep_ms", "ms"),
    Row("   naive status='queued' candidate query, 1M rows", "big_naive_query_ms", "ms"),
    Row("7. peak RSS, --max-concurrent 32, 32 hooks", "c32_rss_mb", "MB", "<= 64 MB", lambda v: v <= 64),
    Row("   ... its rate (N / wall)", "c32_rate", "/s"),
    Row("   peak RSS, 16 hooks (figure 2)", "one_rss_mb", "MB", "<= 64 MB", lambda v: v <= 64),
    Row("8. dead neighbours: healthy hook latency p50", "dead_p50", "ms"),
    Row("   healthy hook latency p99", "dead_p99", "ms", "<= 1000 ms", lambda v: v <= 1000),
    Row("   healthy hook latency max", "dead_max", "ms"),
    Row("   dead hooks attempted during the run", "dead_tried_pct", "%", "100%", lambda v: v >= 100),
    Row("   dead hooks' attempts in all", "dead_attempts", ""),
    Row("9. small queue, 100 hooks: first delivery after start", "small_first_s", "s", digits=2),
    Row("   small queue: drain rate (first to last delivery)", "small_rate", "/s"),
    Row("   small queue: peak RSS", "small_rss_mb", "MB", "<= 120 MB", lambda v: v <= 120),
    Row("   backlog: first delivery after start", "backlog_first_s", "s", "<= 2 s", lambda v: v <= 2, digits=2),
    Row("   backlog: drain rate over the window", "backlog_rate", "/s"),
    Row("   ... as % of the small queue's", "backlog_rate_pct", "%", ">= 90%", lambda v: v >= 90),
    Row("   backlog: peak RSS", "backlog_rss_mb", "MB", "<= 150 MB", lambda v: v <= 150),
    Row("10. many in flight: deliveries in flight at the peak", "many_in_flight", "", "256", lambda v: v >= 256),
    Row("   connections to Phorge's database", "many_connections", "", "<= 8", lambda v: v <= 8),
    Row("   threads of the process", "many_threads", ""),
    Row("   RSS at the peak", "many_rss_mb", "MB"),
    Row("11. as its own MariaDB user: statements per delivery", "db_statements_per_delivery", "stmts", digits=2),
    Row("   ... rows read per delivery", "db_rows_per_delivery", "rows", digits=2),
    Row("   ... MariaDB CPU per delivery", "db_cpu_ms_per_delivery", "ms", digits=3),
    Row("   ... deliveries one MariaDB core carries", "db_deliveries_per_core", "/s"),
    Row("   idle worker: statements per second", "db_idle_statements_per_sec", "/s", digits=2),
    Row("   ... rows read per second", "db_idle_rows_per_sec", "/s", digits=1),
    Row("   ... MariaDB CPU per second", "db_idle_cpu_ms_per_sec", "ms", digits=3),
    Row("   ... idle workers one MariaDB core carries", "db_idle_workers_per_core", "workers"),
    Row(
        "12. pages at the large size: the slowest page (table below)",
        "pages_worst_page_ms",
        "ms",
        "<= 200 ms",
        lambda v: v <= 200,
        digits=1,
    ),
    Row(
        "   the slowest JSON endpoint or /metrics",
        "pages_worst_json_ms",
        "ms",
        "<= 100 ms",
        lambda v: v <= 100,
        digits=1,
    ),
    Row("   the largest ratio, large / small size", "pages_worst_ratio", "x", "<= 2x", lambda v: v <= 2, digits=2),
    Row("   one dashboard view: statements to Phorge's database", "pages_dashboard_statements", "stmts", digits=1),
    Row("   ... rows read", "pages_dashboard_rows", "rows", "<= 10000", lambda v: v <= 10_000),
    Row("   one /api/webhook/stats: statements", "pages_stats_statements", "stmts", digits=1),
    Row("   ... rows read", "pages_stats_rows", "rows", "<= 10000", lambda v: v <= 10_000),
    Row("   one refresh of the counts, nothing changed: rows read", "pages_refresh_rows", "rows"),
    Row("   the first count of the large history (once, then kept)", "pages_first_count_sec", "s", digits=1),
]


def code_state() -> tuple[str, str]:
    """(description, digest) of the production code measured: HEAD, uncommitted files, a hash of the sources."""
    digest = hashlib.sha256()
    for package in ("webhook_delivery", "gorge_site"):
        for path in sorted((TREE / package).rglob("*.py")):
            digest.update(path.relative_to(TREE).as_posix().encode())
            digest.update(path.read_bytes())
    if TREE != ROOT:
        return f"the sources in {TREE} (BENCH_TREE)", digest.hexdigest()[:12]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else "?"

    head = git("rev-parse", "--short", "HEAD")
    changed = git("diff", "--name-only", "HEAD", "--", "webhook_delivery", "gorge_site").split()
    dirty = f" + uncommitted changes in {', '.join(changed)}" if changed and changed != ["?"] else ""
    return f"HEAD {head}{dirty}", digest.hexdigest()[:12]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller N, no one-million-row part")
    parser.add_argument("--smoke", action="store_true", help="tiny N, seconds: proves the command works")
    parser.add_argument(
        "--repeat", type=int, metavar="K", help="repetitions, the table shows medians (default 3; quick/smoke 1)"
    )
    parser.add_argument("--requests", type=int, help="N for the 16-hook runs (default 6000; quick 1500)")
    parser.add_argument("--receiver", choices=["auto", "nginx", "python"], default="auto")
    parser.add_argument("--database", default="gwbench_herald", help="throwaway herald database (<ns>_herald)")
    parser.add_argument("--history-database", default="gwbench1m_herald", help="cached 1M-row database")
    parser.add_argument("--backlog-database", default="gwbenchq_herald", help="cached queued-backlog database")
    parser.add_argument(
        "--only", metavar="N[,N...]", help="only these figures (e.g. 9 or 2,3; figure 1 comes with 2 and 3)"
    )
    parser.add_argument("--drop-history", action="store_true", help="drop the cached 1M-row databases and exit")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, nginx config)")
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick or args.smoke else 3
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        args.only = {int(part) for part in args.only.split(",")} if args.only else set(range(1, 13))
    except ValueError:
        parser.error("--only takes figure numbers, e.g. 9 or 2,3")
    if not args.only <= set(range(1, 13)):
        parser.error("--only takes figure numbers from 1 to 12")
    if args.only & {2, 3}:
        args.only.add(1)  # their percentages are of the bare client's rate
    if not all(name.endswith("_herald") for name in (args.database, args.history_database, args.backlog_database)):
        parser.error("database names must end in _herald (<namespace>_herald)")
    return args


def sizes(args: argparse.Namespace) -> Sizes:
    if args.smoke:
        return Sizes(
            requests=args.requests or 200,
            single_hook=100,
            latency_sec=3,
            idle_polls=100,
            history_rows=0,
            bare_sec=0.5,
            dead_hooks=5,
            dead_head_start_sec=2,
            healthy_sec=2,
            dead_timeout="3",
            backlog_rows=3000,
            backlog_window_sec=1,
            small_queue=300,
            many_hooks=12,
            many_in_flight=16,
            page_sizes=(1_000, 10_000),
            page_rounds=1,
            page_turns=1,
        )
    if args.quick:
        return Sizes(
            requests=args.requests or 1500,
            single_hook=600,
            latency_sec=10,
            idle_polls=300,
            history_rows=0,
            bare_sec=2,
            dead_hooks=40,
            dead_head_start_sec=10,
            healthy_sec=20,
            backlog_rows=100_000,
            backlog_window_sec=10,
            small_queue=3000,
            page_rounds=5,
            page_turns=2,
        )
    return Sizes(
        requests=args.requests or 6000,
        single_hook=3000,
        latency_sec=20,
        idle_polls=1000,
        history_rows=HISTORY_ROWS,
        bare_sec=3,
    )


def repetition(ctx: Context, figures: dict[str, float], only: set[int]) -> None:
    """Fills `figures` as it goes, so a broken step still leaves the figures measured before it."""
    n = ctx.sizes.requests
    if 1 in only:
        log(f"run {ctx.repetition}: 1. bare client")
        sample = ctx.db.new_request(Hook("PHID-HWBH-benchbenchbenchbench", "k" * 32, ""), int(time.time()))
        figures.update(scenarios.bare_client(ctx, sample))
    if 2 in only:
        log(f"run {ctx.repetition}: 2. one process, 16 hooks, N={n}")
        figures.update(scenarios.drain(ctx, "one", hooks=16, count=n))
        figures["one_pct"] = 100 * figures["one_rate"] / figures["bare_rate"]
        figures["one_span_pct"] = 100 * figures["one_span_rate"] / figures["bare_rate"]
        log(f"run {ctx.repetition}: 2b. the same with the attempt log off")
        figures.update(scenarios.drain(ctx, "nolog", hooks=16, count=n, env={"GORGE_WEBHOOK_ATTEMPT_LOG": "false"}))
        figures["log_pct"] = 100 * figures["one_rate"] / figures["nolog_rate"]
        log(f"run {ctx.repetition}: 2c. the same, the worker on one core")
        figures.update(scenarios.drain(ctx, "pinned", hooks=16, count=n, cpu=max(os.sched_getaffinity(0))))
        figures["pinned_span_pct"] = 100 * figures["pinned_span_rate"] / figures["bare_rate"]
    if 3 in only:
        log(f"run {ctx.repetition}: 3. one hook, N={ctx.sizes.single_hook}")
        figures.update(scenarios.drain(ctx, "single", hooks=1, count=ctx.sizes.single_hook))
        figures["single_span_pct"] = 100 * figures["single_span_rate"] / figures["bare_rate"]
    if 4 in only:
        log(f"run {ctx.repetition}: 4. two processes, 16 hooks, N={n}")
        figures.update(scenarios.drain(ctx, "two", hooks=16, count=n, processes=2))
    if 5 in only:
        log(f"run {ctx.repetition}: 5. latency, {ctx.sizes.latency_sec:.0f} s at 20 inserts/s")
        figures.update(scenarios.latency(ctx))
        figures.update(scenarios.idle_database_cost(ctx, ctx.sizes.latency_sec / 2))
    if 6 in only:
        log(f"run {ctx.repetition}: 6. retained history" + ("" if ctx.sizes.history_rows else " (empty only)"))
        figures.update(scenarios.history(ctx))
    if 7 in only:
        log(f"run {ctx.repetition}: 7. --max-concurrent 32, 32 hooks, N={n}")
        figures.update(scenarios.drain(ctx, "c32", hooks=32, count=n, max_concurrent=32))
    if 8 in only:
        log(f"run {ctx.repetition}: 8. dead neighbours, {ctx.sizes.dead_hooks} hooks that never answer")
        figures.update(scenarios.dead_neighbours(ctx))
    if 9 in only:
        log(f"run {ctx.repetition}: 9. backlog, {ctx.sizes.backlog_rows:,} queued requests")
        figures.update(scenarios.backlog(ctx))
    if 10 in only:
        log(f"run {ctx.repetition}: 10. {ctx.sizes.many_in_flight} deliveries in flight")
        figures.update(scenarios.many_in_flight(ctx))
    if 11 in only:
        log(f"run {ctx.repetition}: 11. Phorge's database, the worker as its own MariaDB user")
        figures.update(scenarios.database_cost(ctx, n, ctx.sizes.latency_sec / 2))
    if 12 in only:
        log(f"run {ctx.repetition}: 12. pages at {' and '.join(f'{s:,}' for s in ctx.sizes.page_sizes)} retained")
        figures.update(page_figures(ctx))


def page_figures(ctx: Context) -> dict[str, float]:
    """Figure 12 (bench/pages.py): each view's median at both sizes, and the summary rows."""
    small, large = ctx.sizes.page_sizes
    cached = ctx.sizes.page_sizes == Sizes.page_sizes  # the real sizes are built once and kept
    names = (
        None if cached else {rows: ctx.db.name.removesuffix("_herald") + f"pg{rows}_herald" for rows in (small, large)}
    )
    try:
        found = pages.measure_sizes(
            [small, large],
            ctx.sizes.page_rounds,
            ctx.sizes.page_turns,
            log=ctx.log,
            names=names,
            cache=None if cached else ctx.workdir,
        )
    finally:
        for name in (names or {}).values():
            HeraldDB(name).drop()
    figures: dict[str, float] = {}
    for view, kind in pages.VIEWS:
        figures[f"page {kind} {view} small"] = found[small][f"ms {view}"]
        figures[f"page {kind} {view} large"] = found[large][f"ms {view}"]
    pages_ms = [figures[f"page page {view} large"] for view, kind in pages.VIEWS if kind == "page"]
    json_ms = [figures[f"page json {view} large"] for view, kind in pages.VIEWS if kind == "json"]
    ratios = [found[large][f"ms {view}"] / found[small][f"ms {view}"] for view, _kind in pages.VIEWS]
    figures.update(
        pages_worst_page_ms=max(pages_ms),
        pages_worst_json_ms=max(json_ms),
        pages_worst_ratio=max(ratios),
        pages_dashboard_statements=found[large]["statements dashboard /"],
        pages_dashboard_rows=found[large]["rows read dashboard /"],
        pages_stats_statements=found[large]["statements /api/webhook/stats"],
        pages_stats_rows=found[large]["rows read /api/webhook/stats"],
    )
    if "rows read refresh, nothing changed" in found[large]:  # a tree that keeps counts
        figures["pages_refresh_rows"] = found[large]["rows read refresh, nothing changed"]
        figures["pages_first_count_sec"] = found[large]["first_count_sec"]
    figures["pages_buffer_pool_mb"] = pages.buffer_pool_mb()
    return figures


def page_table(runs: list[dict[str, float]], sizes: tuple[int, int]) -> list[str]:
    """Figure 12 side by side: each view's median at both sizes (medians over the runs) and their ratio."""
    if not any("pages_worst_ratio" in run for run in runs):
        return []
    small, large = (f"{size // 1000:,}k" if size < 1_000_000 else f"{size // 1_000_000}M" for size in sizes)
    width = max(len(view) for view, _kind in pages.VIEWS)
    lines = [
        f"12. each view through Django's test client, median (ms); MariaDB's buffer pool "
        f"{median([run['pages_buffer_pool_mb'] for run in runs if 'pages_buffer_pool_mb' in run]):.0f} MB",
        f"{'view':<{width}}  {small:>9}  {large:>9}  {'ratio':>6}  target",
    ]
    for view, kind in pages.VIEWS:
        low = median([run[f"page {kind} {view} small"] for run in runs if f"page {kind} {view} small" in run])
        high = median([run[f"page {kind} {view} large"] for run in runs if f"page {kind} {view} large" in run])
        bound = 200 if kind == "page" else 100
        mark = "PASS" if high <= bound and high <= 2 * low else "MISS"
        lines.append(f"{view:<{width}}  {low:>9.1f}  {high:>9.1f}  {high / low:>5.2f}x  <= {bound} ms, <= 2x  {mark}")
    return lines


def fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def table(runs: list[dict[str, float]]) -> list[str]:
    lines = []
    width = max(len(row.label) for row in ROWS)
    spread = len(runs) > 1
    header = f"{'figure':<{width}}  {'median' if spread else 'value':>12}"
    if spread:
        header += f"  {'min .. max':>21}"
    header += f"  {'target':<10}  mark"
    lines += [header, "-" * len(header)]
    for row in ROWS:
        values = [run[row.key] for run in runs if row.key in run]
        if not values:
            continue
        middle = median(values)
        line = f"{row.label:<{width}}  {fmt(middle, row.digits) + ' ' + row.unit:>12}"
        if spread:
            line += f"  {fmt(min(values), row.digits) + ' .. ' + fmt(max(values), row.digits):>21}"
        mark = "" if row.passes is None else ("PASS" if row.passes(middle) else "MISS")
        line += f"  {row.target:<10}  {mark}"
        lines.append(line.rstrip())
    return lines


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.drop_history:
        for name in (args.history_database, args.backlog_database):
            HeraldDB(name).drop()
            print(f"dropped {name}")
        return 0
    size = sizes(args)
    workdir = Path(tempfile.mkdtemp(prefix="gwbench-"))
    code, digest = code_state()
    busy = machine_busy_fraction()
    load = os.getloadavg()
    db = HeraldDB(args.database)
    receiver = None
    hang = None
    # Full runs keep the backlog database between runs; smaller ones build and drop their own.
    own_backlog = args.database.removesuffix("_herald") + "bl_herald"
    backlog_db = args.backlog_database if size.backlog_rows >= 1_000_000 else own_backlog
    runs: list[dict[str, float]] = []
    ctx: Context | None = None
    failed = False
    started = time.monotonic()
    try:
        db.create()
        migrate(worker_env(workdir, db.name), workdir / "migrate.log")
        receiver = make_receiver(args.receiver, workdir)
        hang = make_receiver("hang", workdir)
        ctx = Context(
            workdir, receiver, db, size, log, scenarios.mariadb_pid(), args.history_database, hang, backlog_db
        )
        for k in range(1, args.repeat + 1):
            ctx.repetition = k
            runs.append({})
            repetition(ctx, runs[-1], args.only)
    except BenchError as exc:
        log(f"BROKEN: {exc}")
        failed = True
    except Exception:  # noqa: BLE001 - report, clean up, exit non-zero
        traceback.print_exc()
        failed = True
    finally:
        for running in (receiver, hang):
            if running is not None:
                running.stop()
        db.drop()
        if backlog_db != args.backlog_database:
            HeraldDB(backlog_db).drop()

    elapsed = time.monotonic() - started
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    print()
    print(
        f"gorge-webhook bench ({mode}): N={size.requests} over 16 hooks, one hook N={size.single_hook}, "
        f"{args.repeat} run(s), receiver {receiver.kind if receiver else args.receiver}, "
        f"payload {int(runs[0].get('body_bytes', 0)) if runs else '?'} bytes"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f}, {100 * busy:.0f}% of all CPUs busy "
        f"just before the bench (other work competes with it), took {elapsed:.0f} s"
    )
    _, digest_after = code_state()
    changed = "" if digest_after == digest else "; CHANGED DURING THE RUN: figures mix code versions"
    print(f"code: {code} (sources sha256 {digest}{changed})")
    print()
    for line in table(runs):
        print(line)
    if extra := page_table(runs, size.page_sizes):
        print()
        for line in extra:
            print(line)
    checks = ctx.checks if ctx else []
    notes = ctx.notes if ctx else []
    print()
    for check in checks:
        if not check.ok:
            print(f"FAILED {check.line()}")
    for note in notes:
        print(f"note: {note}")
    bad = [check for check in checks if not check.ok]
    total = sum(check.sent for check in checks)
    duplicates = sum(check.duplicates for check in checks)
    lost = sum(check.lost + max(0, check.expected - check.sent) for check in checks)
    delivered = bool(args.only - {12})  # figure 12 alone starts no worker
    verdict = "every request exactly once" if checks and not bad else "FAILED" if delivered else "no worker ran"
    print(
        f"correctness: {total} sent in {len(checks)} worker runs, {duplicates} duplicates, {lost} lost "
        f"(database and receiver): {verdict}"
    )
    if args.keep or failed or bad:
        print(f"work directory kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed or bad or (delivered and not checks) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
