"""Wall time per phase of an in-process `build_worker(config, once=True).run()`: where a delivery's time goes.

    .venv/bin/python bench/phases.py [--requests 6000] [--hooks 16] [--max-concurrent 16] [--cprofile]

Same setup as bench/run.py (own herald database, nginx receiver). Wraps the worker's own methods with
timers (wall time per call, all threads) and prints calls, total and mean per phase, plus the number of
main-thread polls and the gap a hook waits between two of its jobs. `--cprofile` also prints the main
thread's cProfile (the scheduler; pool threads are not profiled by cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.herald import HeraldDB
from bench.receivers import make_receiver
from bench.workers import migrate, worker_env


class Timers:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                with self.lock:
                    self.calls[label] += 1
                    self.seconds[label] += elapsed

        setattr(owner, name, timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--hooks", type=int, default=16)
    parser.add_argument("--max-concurrent", type=int, default=16)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--database", default="gwphases_herald")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="gwphases-"))
    db = HeraldDB(args.database)
    db.create()
    receiver = make_receiver("auto", workdir)
    try:
        env = worker_env(workdir, db.name)
        migrate(env, workdir / "migrate.log")
        hooks = [db.add_hook(receiver.url(f"/phases/h{i}")) for i in range(args.hooks)]
        db.seed(hooks, args.requests)
        os.environ.update(env)
        os.environ["LOG_LEVEL"] = os.environ.get("BENCH_LOG_LEVEL", "INFO")
        run_worker(args, workdir)
        print(f"database outcome: {db.outcome_counts()}")
    finally:
        receiver.stop()
        db.drop()
    print(f"worker log: {workdir / 'worker.log'}")
    return 0


def run_worker(args: argparse.Namespace, workdir: Path) -> None:
    import logging

    import django

    django.setup()
    logging.getLogger().handlers[0].setStream(open(workdir / "worker.log", "a"))
    from django.conf import settings

    from webhook_delivery.phorge import payload
    from webhook_delivery.worker import job, results, transport
    from webhook_delivery.worker import loop as worker
    from webhook_delivery.worker.dispatcher import Dispatcher
    from webhook_delivery.worker.sessions import LockSession
    from webhook_delivery.worker.store import Store
    from webhook_delivery.worker.window import QueueWindow

    timers = Timers()
    for name in (
        "claim",
        "write_outcome",
        "write_then_claim",
        "recent_failures",
        "hooks",
        "fetch",
        "scan_after",
        "untried",
        "retries",
    ):
        timers.wrap(Store, name, f"store.{name}")
    timers.wrap(LockSession, "acquire", "locks.acquire (GET_LOCK)")
    timers.wrap(LockSession, "release", "locks.release (RELEASE_LOCK)")
    timers.wrap(QueueWindow, "poll", "window.poll (main thread)")
    timers.wrap(Dispatcher, "process", "dispatcher.process (all of an attempt)")
    timers.wrap(transport, "post", "  transport.post (HTTP)")
    timers.wrap(transport, "check_uri", "  transport.check_uri")
    timers.wrap(payload, "build_payload", "  payload.build_payload")
    timers.wrap(payload, "sign", "  payload.sign")
    timers.wrap(job.JobRunner, "run", "job.run (one hook's job)")
    timers.wrap(results.Results, "record", "results.record (metrics + log line)")
    timers.wrap(worker.Worker, "_poll_and_schedule", "worker._poll_and_schedule (main thread)")
    # The dispatcher module imported these names directly: wrap its references too.
    import webhook_delivery.worker.dispatcher as dispatcher_module

    dispatcher_module.build_payload = payload.build_payload
    dispatcher_module.sign = payload.sign

    job_ends: dict[str, float] = {}
    gaps: list[float] = []
    original_run = job.JobRunner.run

    def run_job(self: Any, one: Any) -> Any:
        ended = job_ends.get(one.hook_phid)
        if ended is not None:
            gaps.append(time.perf_counter() - ended)
        try:
            return original_run(self, one)
        finally:
            job_ends[one.hook_phid] = time.perf_counter()

    job.JobRunner.run = run_job

    the_worker = worker.build_worker(settings.GORGE_WEBHOOK, once=True, max_concurrent=args.max_concurrent)
    profiler = cProfile.Profile() if args.cprofile else None
    cpu0 = time.process_time()
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    the_worker.run()
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    delivered = the_worker.counters.snapshot().get("deliveries.sent", 0)
    print(
        f"{delivered} delivered in {wall:.2f} s in-process ({delivered / wall:.0f}/s), process CPU {cpu:.2f} s "
        f"({1000 * cpu / max(1, delivered):.2f} ms per delivery); timers add a little overhead"
    )
    print(f"\n{'phase':<48} {'calls':>7} {'total s':>8} {'mean ms':>8} {'per delivery ms':>15}")
    for label in sorted(timers.seconds, key=lambda k: -timers.seconds[k]):
        calls, total = timers.calls[label], timers.seconds[label]
        print(
            f"{label:<48} {calls:>7} {total:>8.2f} {1000 * total / calls:>8.3f} "
            f"{1000 * total / max(1, delivered):>15.3f}"
        )
    if gaps:
        gaps.sort()
        print(
            f"\ngap between two jobs of one hook: {len(gaps)} gaps, median {1000 * gaps[len(gaps) // 2]:.1f} ms, "
            f"max {1000 * gaps[-1]:.1f} ms"
        )
    if profiler is not None:
        print("\nmain thread cProfile (cumulative, top 25)")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
