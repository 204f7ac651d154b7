"""Worker CPU per delivery of two commits, start-up excluded: the delivery path's own cost, A/B.

    .venv/bin/python bench/ab_cpu.py BASE NEW [--requests N] [--rounds K]     (default 6000 requests, 3 rounds)

Both commits' sources are unpacked with `git archive` beside this tree's virtualenv; this tree's bench code
seeds the same queue (16 hooks, N requests, Phorge's rows) and starts the same receiver (nginx) for both.
Each round runs `deliver_webhooks --once --max-concurrent 16` of both, in alternating order, once on an
empty queue (its CPU is the start-up's) and once on the N requests; CPU comes from wait4(). bench/run.py's
quick figures include start-up, which at small N outweighs a change in the delivery path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PYTHON, ROOT  # this tree's bench, whichever commits are measured
from bench.herald import HeraldDB
from bench.receivers import NginxReceiver
from bench.workers import worker_env

DATABASE = "gwabcpu_herald"
HOOKS = 16


def unpack(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def once(tree: Path, env: dict[str, str]) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one `deliver_webhooks --once`."""
    started = time.monotonic()
    process = subprocess.Popen(
        [PYTHON, "manage.py", "deliver_webhooks", "--once", "--max-concurrent", str(HOOKS)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"deliver_webhooks in {tree} exited with status {status}")
    return usage.ru_utime + usage.ru_stime, time.monotonic() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gwabcpu-"))
    receiver = NginxReceiver(work).start()
    db = HeraldDB(DATABASE)
    results: dict[str, list[tuple[float, float]]] = {"base": [], "new": []}
    try:
        trees = {name: unpack(getattr(args, name), work / name) for name in results}
        envs = {name: worker_env(work / name, DATABASE) for name in results}
        for name, tree in trees.items():
            subprocess.run([PYTHON, "manage.py", "migrate", "--verbosity", "0"], cwd=tree, env=envs[name], check=True)

        def run(name: str, count: int) -> tuple[float, float]:
            if db.exists():
                db.drop()
            db.create()
            hooks = [db.add_hook(receiver.url(f"/ab/{index}")) for index in range(HOOKS)]
            if count:
                db.seed(hooks, count)
            cpu, wall = once(trees[name], envs[name])
            sent = db.outcome_counts().get(("sent", "okay"), 0)
            if sent != count:
                raise SystemExit(f"{name}: {sent} of {count} requests sent")
            return cpu, wall

        for round_no in range(args.rounds):
            for name in ["base", "new"] if round_no % 2 == 0 else ["new", "base"]:
                start_cpu, _ = run(name, 0)
                cpu, wall = run(name, args.requests)
                per = (cpu - start_cpu) * 1000 / args.requests
                results[name].append((per, args.requests / wall))
                sys.stderr.write(f"[ab] {name}: {per:.3f} ms per delivery (start-up {start_cpu:.2f} s)\n")
    finally:
        receiver.stop()
        if db.exists():
            db.drop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"bench/ab_cpu.py: {args.requests} requests over {HOOKS} hooks, {args.rounds} rounds, medians")
    cpu = {name: median(per for per, _ in runs) for name, runs in results.items()}
    rate = {name: median(r for _, r in runs) for name, runs in results.items()}
    print(
        f"worker CPU per delivery, start-up excluded: base {args.base} {cpu['base']:.3f} ms, new {args.new} "
        f"{cpu['new']:.3f} ms, new/base {cpu['new'] / cpu['base']:.2f}"
    )
    print(
        f"rate (N / wall, start-up included): base {rate['base']:.0f}/s, new {rate['new']:.0f}/s, "
        f"new/base {rate['new'] / rate['base']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
