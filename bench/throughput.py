"""Delivery throughput of commits side by side, in one run, next to a bare client against the same receiver.

    .venv/bin/python bench/throughput.py [REV ...] [--requests N] [--rounds K]      (default: 6a8a48e and
                                                                                 this tree, 3000, 3 rounds)

Each REV's sources are unpacked with `git archive` (`.` is this working tree as it is) beside this tree's
virtualenv; this tree's bench seeds the same queue and starts the same receiver (Debian's nginx) for all.
Each round, in rotating order, every tree runs `deliver_webhooks --once`: N requests over 16 hooks with
32 in flight, then N/3 requests to one hook (one call in flight, as Phorge promises); and one thread of
`requests.Session` posts the same body to the same receiver (the bare client). Rates are first to last
delivery at the receiver (start-up excluded), CPU from wait4(), peak RSS from the worker's own VmHWM. It
prints medians, each rate as % of the bare client of the same rounds, and the ratio of each tree to the first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PYTHON, ROOT  # this tree's bench, whichever commits are measured
from bench.herald import HeraldDB
from bench.receivers import NginxReceiver
from bench.workers import PeakRss, worker_env

DATABASE = "gwthroughput_herald"
HOOKS = 16
IN_FLIGHT = 32


def unpack(rev: str, into: Path) -> Path:
    if rev == ".":
        shutil.copytree(ROOT, into, ignore=shutil.ignore_patterns(".venv", ".git", "var", "__pycache__"))
        return into
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


@dataclass
class Runs:
    many: list[float] = field(default_factory=list)  # deliveries per second, 16 hooks
    one: list[float] = field(default_factory=list)  # deliveries per second, one hook
    rss: list[float] = field(default_factory=list)  # MB, the 16-hook run
    cpu: list[float] = field(default_factory=list)  # ms of worker CPU per delivery, the 16-hook run


def deliver(tree: Path, env: dict[str, str], max_concurrent: int) -> tuple[float, float]:
    process = subprocess.Popen(
        [PYTHON, "manage.py", "deliver_webhooks", "--once", "--max-concurrent", str(max_concurrent)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak = PeakRss(process.pid)
    _, status, usage = os.wait4(process.pid, 0)
    rss = peak.stop(usage.ru_maxrss)
    if status != 0:
        raise SystemExit(f"deliver_webhooks in {tree} exited with status {status}")
    return rss, usage.ru_utime + usage.ru_stime


def span_rate(receiver: NginxReceiver, prefix: str, count: int) -> float:
    times = sorted(hit.at for hit in receiver.hits(prefix, expected=count))
    if len(times) != count:
        raise SystemExit(f"{len(times)} of {count} deliveries under {prefix} reached the receiver")
    return (count - 1) / (times[-1] - times[0])


def bare(url: str, body: bytes, headers: dict[str, str], seconds: float) -> float:
    with requests.Session() as session:
        deadline = time.monotonic() + seconds
        sent, started = 0, time.monotonic()
        while time.monotonic() < deadline:
            session.post(url, data=body, headers=headers).close()
            sent += 1
        return sent / (time.monotonic() - started)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revs", nargs="*", default=["6a8a48e", "."])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gwthroughput-"))
    receiver = NginxReceiver(work).start()
    db = HeraldDB(DATABASE)
    names = [f"{index}:{rev}" for index, rev in enumerate(args.revs)]
    runs = {name: Runs() for name in names}
    bare_rates: list[float] = []
    one_count = args.requests // 3
    try:
        trees = {
            name: unpack(rev, work / f"tree{index}")
            for index, (name, rev) in enumerate(zip(names, args.revs, strict=True))
        }
        envs = {name: worker_env(work / f"tree{index}", DATABASE) for index, name in enumerate(names)}
        for name, tree in trees.items():
            subprocess.run([PYTHON, "manage.py", "migrate", "--verbosity", "0"], cwd=tree, env=envs[name], check=True)

        def fresh(prefix: str, hooks: int, count: int) -> list:
            if db.exists():
                db.drop()
            db.create()
            made = [db.add_hook(receiver.url(f"/{prefix}/{index}/")) for index in range(hooks)]
            return db.seed(made, count)

        for round_no in range(args.rounds):
            order = names[round_no % len(names) :] + names[: round_no % len(names)]
            for name in order:
                tag = f"r{round_no}t{names.index(name)}"
                fresh(f"{tag}many", HOOKS, args.requests)
                rss, cpu = deliver(trees[name], envs[name], IN_FLIGHT)
                runs[name].many.append(span_rate(receiver, f"/{tag}many/", args.requests))
                runs[name].rss.append(rss)
                runs[name].cpu.append(cpu * 1000 / args.requests)
                fresh(f"{tag}one", 1, one_count)
                deliver(trees[name], envs[name], IN_FLIGHT)
                runs[name].one.append(span_rate(receiver, f"/{tag}one/", one_count))
                sys.stderr.write(
                    f"[throughput] round {round_no} {name}: {runs[name].many[-1]:.0f}/s, one hook "
                    f"{runs[name].one[-1]:.0f}/s, {rss:.0f} MB\n"
                )
            sample = fresh(f"r{round_no}bare", 1, 1)[0]
            headers = {
                "Content-Type": "application/json",
                "X-Phabricator-Webhook-Signature": sample.signature(),
                "User-Agent": "Arcanist/1.0 cURL/7.88.1",
                "Accept": "*/*",
            }
            bare_rates.append(bare(receiver.url(f"/r{round_no}bare/x"), sample.body(), headers, 5.0))
            sys.stderr.write(f"[throughput] round {round_no} bare client: {bare_rates[-1]:.0f}/s\n")
    finally:
        receiver.stop()
        if db.exists():
            db.drop()
        shutil.rmtree(work, ignore_errors=True)
    client = median(bare_rates)
    print(
        f"bench/throughput.py: {args.requests} requests over {HOOKS} hooks ({IN_FLIGHT} in flight) and "
        f"{one_count} to one hook, {args.rounds} rounds, medians; bare requests.Session client {client:.0f}/s"
    )
    first = names[0]
    header = f"{'tree':<24} {'16 hooks':>10} {'% bare':>7} {'one hook':>10} {'% bare':>7} {'RSS MB':>7} {'CPU ms':>7}"
    print(header)
    for name in names:
        many, one = median(runs[name].many), median(runs[name].one)
        print(
            f"{name:<24} {many:>8.0f}/s {many / client:>7.0%} {one:>8.0f}/s {one / client:>7.0%} "
            f"{median(runs[name].rss):>7.1f} {median(runs[name].cpu):>7.3f}"
        )
    for name in names[1:]:
        print(
            f"{name} / {first}: 16 hooks {median(runs[name].many) / median(runs[first].many):.2f}, one hook "
            f"{median(runs[name].one) / median(runs[first].one):.2f}, RSS "
            f"{median(runs[name].rss) / median(runs[first].rss):.2f}, CPU "
            f"{median(runs[name].cpu) / median(runs[first].cpu):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
