"""Where a draining worker spends its CPU: py-spy over `deliver_webhooks --once`, aggregated by component.

    .venv/bin/pip install py-spy        # investigation only, not a project dependency
    .venv/bin/python bench/profile_worker.py [--requests 6000] [--hooks 16] [--max-concurrent 16] [--all-threads]

Same setup as bench/run.py (own herald database, nginx receiver). By default py-spy samples only the thread
holding the GIL (`--gil`): with one core's worth of Python per process, that is the time that decides
throughput. Prints the components (each sample goes to one: logging and metrics wherever they appear in
the stack, otherwise the innermost webhook_delivery frame decides), the functions with the most own time
and the innermost webhook_delivery frames.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PYTHON, ROOT, BenchError
from bench.herald import HeraldDB
from bench.receivers import make_receiver
from bench.workers import migrate, worker_env

# Libraries only ever called for one purpose: anywhere in the stack decides.
LIBRARY_COMPONENTS = [
    ("logging (one INFO line per delivery)", ("logging/__init__.py", "webhook_delivery/logformat.py")),
    ("prometheus metrics", ("prometheus_client/",)),
]
# Otherwise the innermost webhook_delivery frame decides: (file, function or "*") -> component.
OUR_COMPONENTS = {
    ("transport.py", "check_uri"): "URI check + DNS + blacklist",
    ("transport.py", "*"): "HTTP POST (transport.py, curl.py, rawanswer.py)",
    ("curl.py", "*"): "HTTP POST (transport.py, curl.py, rawanswer.py)",
    ("rawanswer.py", "*"): "HTTP POST (transport.py, curl.py, rawanswer.py)",
    ("http1.py", "*"): "HTTP POST (transport.py, curl.py, rawanswer.py)",  # a tree before issue 38
    ("netguard.py", "*"): "URI check + DNS + blacklist",
    ("payload.py", "*"): "payload build + HMAC",
    ("store.py", "claim"): "claim UPDATE",
    ("store.py", "write_outcome"): "result UPDATE",
    ("store.py", "write_then_claim"): "result UPDATE + next claim (one round trip)",
    ("store.py", "recent_failures"): "breaker query (recent_failures)",
    ("sessions.py", "acquire"): "GET_LOCK / RELEASE_LOCK",
    ("sessions.py", "release"): "GET_LOCK / RELEASE_LOCK",
    ("sessions.py", "*"): "session pool (borrow, return)",
    ("store.py", "hooks"): "hooks() reload (main thread)",
    ("store.py", "*"): "window SQL (scan_after, fetch, refills)",
    ("window.py", "*"): "window Python bookkeeping (main thread)",
    ("scheduling.py", "schedulable"): "window Python bookkeeping (main thread)",
    ("scheduling.py", "*"): "scheduling (main loop, poll/absorb/wait)",
    ("loop.py", "run"): "scheduling (main loop, poll/absorb/wait)",
    ("loop.py", "_poll_and_schedule"): "scheduling (main loop, poll/absorb/wait)",
    ("loop.py", "_absorb"): "scheduling (main loop, poll/absorb/wait)",
    ("loop.py", "_wait"): "scheduling (main loop, poll/absorb/wait)",
    ("loop.py", "*"): "delivery loop own code (worker/dispatcher/outcomes)",
    ("job.py", "*"): "delivery loop own code (worker/dispatcher/outcomes)",
    ("results.py", "*"): "delivery loop own code (worker/dispatcher/outcomes)",
    ("pipeline.py", "*"): "delivery loop own code (worker/dispatcher/outcomes)",
    ("dispatcher.py", "*"): "delivery loop own code (worker/dispatcher/outcomes)",
    ("outcomes.py", "*"): "delivery loop own code (worker/dispatcher/outcomes)",
    ("objects.py", "*"): "Phorge lookups (objects, silent, PHP guard)",
    ("databases.py", "*"): "Phorge lookups (objects, silent, PHP guard)",
    ("php_guard.py", "*"): "Phorge lookups (objects, silent, PHP guard)",
    ("php_watch.py", "*"): "Phorge lookups (objects, silent, PHP guard)",
    ("heartbeat.py", "*"): "heartbeat",
}
# py-spy sometimes gets only the innermost frames of a stack: attribute those by library.
FALLBACK_COMPONENTS = [
    ("HTTP POST (transport.py, curl.py, rawanswer.py)", ("http/client.py", "pycurl")),
    ("payload build + HMAC", ("_make_iterencode",)),  # the pure-Python encoder runs only for indent=2
    ("thread pool hand-off", ("concurrent/futures/", "threading.py", "queue.py")),
    ("start-up (imports, django.setup, checks)", ("importlib", "<module>", "django/")),
]


def component(frames: list[str]) -> str:
    for name, needles in LIBRARY_COMPONENTS:
        if any(needle in frame for frame in frames for needle in needles):
            return name
    ours = [frame for frame in frames if "webhook_delivery/" in frame]
    for index in range(len(ours) - 1, -1, -1):
        function, _, where = ours[index].partition(" (webhook_delivery/")
        module = where.split(":", 1)[0].rsplit("/", 1)[-1]
        function = function.rsplit(".", 1)[-1]
        if module == "phpjson.py":  # shared by the payload and properties: the caller decides
            caller = ours[index - 1] if index else ""
            return "payload build + HMAC" if "payload.py" in caller else "properties JSON decode/encode"
        found = OUR_COMPONENTS.get((module, function)) or OUR_COMPONENTS.get((module, "*"))
        if found:
            return found
    for name, needles in FALLBACK_COMPONENTS:
        if any(needle in frame for frame in frames for needle in needles):
            return name
    return "other" if any(frames) else "no Python frame (native code, thread start)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--hooks", type=int, default=16)
    parser.add_argument("--max-concurrent", type=int, default=16)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--all-threads", action="store_true", help="sample every thread, not only the GIL holder")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--database", default="gwprof_herald")
    args = parser.parse_args()
    py_spy = shutil.which("py-spy", path=str(Path(PYTHON).parent)) or shutil.which("py-spy")
    if py_spy is None:
        raise BenchError("py-spy is not installed: .venv/bin/pip install py-spy")

    workdir = Path(tempfile.mkdtemp(prefix="gwprof-"))
    db = HeraldDB(args.database)
    receiver = None
    try:
        db.create()
        env = worker_env(workdir, db.name)
        migrate(env, workdir / "migrate.log")
        receiver = make_receiver("auto", workdir)
        hooks = [db.add_hook(receiver.url(f"/prof/h{i}")) for i in range(args.hooks)]
        db.seed(hooks, args.requests)
        raw = workdir / "profile.txt"
        command = [py_spy, "record", "--format", "raw", "--rate", str(args.rate), "--output", str(raw), "--nonblocking"]
        if not args.all_threads:
            command.append("--gil")
        command += [
            "--",
            PYTHON,
            "manage.py",
            "deliver_webhooks",
            "--once",
            "--max-concurrent",
            str(args.max_concurrent),
        ]
        started = time.monotonic()
        with (workdir / "worker.log").open("wb") as out:
            done = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise BenchError(f"py-spy/worker exited {done.returncode}, see {workdir / 'worker.log'}")
        sent = db.outcome_counts().get(("sent", "okay"), 0)
        print(f"{sent}/{args.requests} sent in {wall:.1f} s under py-spy ({sent / wall:.0f}/s, slowed by sampling)")
        report(raw, args.top)
    finally:
        if receiver is not None:
            receiver.stop()
        db.drop()
    print(f"raw profile and logs: {workdir}")
    return 0


def report(raw: Path, top: int) -> None:
    stacks: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    total = sum(stacks.values()) or 1
    components: Counter[str] = Counter()
    own: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split(";")
        own[frames[-1]] += count
        for frame in reversed(frames):
            if "webhook_delivery/" in frame:
                ours[frame] += count
                break
        components[component(frames)] += count
    print(f"\n{total} samples\n\ncomponent (share of samples)")
    for name, count in components.most_common():
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("\nown time, top functions")
    for frame, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    print("\ninnermost webhook_delivery frame (time spent in or below it)")
    for frame, count in ours.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")


if __name__ == "__main__":
    sys.exit(main())
