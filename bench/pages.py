"""Figure 12: what each page and JSON endpoint costs at a large install, at two sizes of history.

    .venv/bin/python bench/pages.py [--sizes 100000,1000000] [--rounds 7]

For each size, the install of bench/pagedata.py (100 hooks, a week of requests: 97 % sent, 2.5 % failed,
0.5 % queued, and as many attempts in the attempt log), then in a process of its own (the measured tree's
Django, its settings from the environment, as deployed): the counts refreshed until complete, as a running
worker keeps them; each view through Django's test client, `rounds` times after one warm-up, the median;
and what one dashboard view and one `/api/webhook/stats` call cost Phorge's database, the herald connection
being a MariaDB user of its own (MariaDB's `userstat`, as figure 11 measures the worker): statements and rows
read. Then what one refresh of the counts reads when nothing changed and after 1,000 deliveries.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if "--measure" not in sys.argv:  # the measuring process runs the measured tree's Django and nothing of the bench
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.common import PYTHON, ROOT, SERVER, TREE, BenchError, connect
    from bench.dbcost import WorkerUser
    from bench.pagedata import ensure_herald, site_database
    from bench.workers import worker_env

    CACHE = ROOT / "var" / "bench"
TOKEN = "bench-" + secrets.token_hex(8)  # the measuring process inherits it
COST_VIEWS = 10
VIEWS = [
    ("dashboard /", "page"),
    ("a hook's page", "page"),
    ("the requeue dry run", "page"),
    ("a request's page", "page"),
    ("admin request list, status = failed", "page"),
    ("admin search, one request's full PHID", "page"),
    ("admin search, an object's PHID (bounded)", "page"),
    ("admin attempt list", "page"),
    ("/api/webhook/stats", "json"),
    ("/api/webhook/health", "json"),
    ("/api/webhook/hooks", "json"),
    ("/metrics", "json"),
]


def buffer_pool_mb() -> int:
    admin = connect()
    try:
        cursor = admin.cursor()
        cursor.execute("SELECT @@GLOBAL.innodb_buffer_pool_size")
        return int(cursor.fetchone()[0]) // (1024 * 1024)
    finally:
        admin.close()


def measure_size(
    rows: int, rounds: int, *, log: Any, name: str | None = None, cache: Path | None = None, attempt: int = 0
) -> dict[str, Any]:
    """Builds (or reuses) the install of this size and measures it in a process of its own. `name` and
    `cache`: a herald database and a folder of the caller's (the smoke run's, dropped after it)."""
    db, _end = ensure_herald(rows, log=log, name=name)
    db.close()
    workdir = Path(tempfile.mkdtemp(prefix="gwbench-pages-"))
    try:
        base_env = _env(workdir, db.name, "")
        cached = site_database(rows, cache or CACHE, base_env, log=log, database=db.name)
        site = workdir / "site.sqlite3"
        shutil.copyfile(cached, site)
        with WorkerUser(db.name) as user:
            env = _env(workdir, db.name, user.url)
            done = subprocess.run(
                [PYTHON, str(Path(__file__).resolve()), "--measure", str(rows), "--rounds", str(rounds)],
                cwd=TREE,
                env=env,
                capture_output=True,
                text=True,
                timeout=3600,
                check=False,
                input=json.dumps(
                    {"user": user.url.split("://", 1)[1].split(":", 1)[0], "admin": dataclasses.asdict(SERVER)}
                ),
            )
            if done.returncode != 0 and attempt == 0:  # once more: a shared server's hiccup is not the tree's
                log(f"pages at {rows:,}: measured again after {done.stderr.strip().splitlines()[-1][:200]}")
                return measure_size(rows, rounds, log=log, name=name, cache=cache, attempt=1)
            if done.returncode != 0:
                raise BenchError(f"pages at {rows:,}: {done.stderr[-3000:]}")
            return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def measure_sizes(
    sizes: list[int],
    rounds: int,
    turns: int,
    *,
    log: Any,
    names: dict[int, str] | None = None,
    cache: Path | None = None,
) -> dict[int, dict[str, Any]]:
    """Each size measured `turns` times, the sizes taking turns (small, large, large, small, ...) so that a
    shared machine's drift falls on both; each figure the median of its turns."""
    found: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes}
    for turn in range(turns):
        for rows in sizes if turn % 2 == 0 else list(reversed(sizes)):
            name = None if names is None else names[rows]
            found[rows].append(measure_size(rows, rounds, log=log, name=name, cache=cache))
    return {rows: {key: statistics.median(one[key] for one in runs) for key in runs[0]} for rows, runs in found.items()}


def _env(workdir: Path, database: str, url: str) -> dict[str, str]:
    """The workers' environment (bench/workers.py), the herald connection as `url` when given, and what the
    pages need."""
    env = worker_env(workdir, database)
    env.update(
        GORGE_SERVICE_TOKEN=TOKEN,
        # A running worker keeps the counts (the bench refreshes them first): no view refreshes them itself.
        GORGE_WEBHOOK_COUNTS_REFRESH_SEC="3600",
        LOG_LEVEL="WARNING",
        ALLOWED_HOSTS="testserver",
        GORGE_BEHIND_TLS_PROXY="false",
        PYTHONPATH=str(TREE),
    )
    if url:
        env["GORGE_WEBHOOK_DATABASE_URL"] = url
    return env


# -- inside the measuring process ------------------------------------------------------------------------


def _measure(rows: int, rounds: int) -> dict[str, Any]:  # pragma: no cover - runs in its own process
    import django

    django.setup()
    from django.conf import settings

    # The pages straight from the apps' static folders, without collectstatic (as the tests render them).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.test import Client

    from webhook_delivery.web.metrics import COLLECTOR

    user_stats = _UserStats(json.loads(sys.stdin.read()))
    started = time.monotonic()
    user_stats.reset()
    kept = _keep_counts(settings.GORGE_WEBHOOK)
    figures: dict[str, Any] = {"rows": rows}
    if kept:
        figures.update(first_count_sec=time.monotonic() - started, **user_stats.read("first_count"))
    staff = get_user_model().objects.create_superuser("bench", "bench@example.invalid", secrets.token_hex(8))
    client = Client()
    client.force_login(staff)
    with connections["phorge"].cursor() as cursor:
        cursor.execute("SELECT phid FROM herald_webhook ORDER BY id LIMIT 1 OFFSET 5")
        failing_hook = cursor.fetchone()[0]
        failing_hook = failing_hook.decode() if isinstance(failing_hook, bytes) else failing_hook
    request_phid = f"PHID-HWBR-pg{rows // 2:019d}"
    newest_object = f"PHID-TASK-pg{rows - 10:019d}"
    requests = "/admin/webhook_delivery/heraldwebhookrequest/"
    urls = {
        "dashboard /": "/",
        "a hook's page": f"/hooks/{failing_hook}/",
        "the requeue dry run": f"/hooks/{failing_hook}/requeue/",
        "a request's page": f"/requests/{request_phid}/",
        "admin request list, status = failed": f"{requests}?status__exact=failed",
        "admin search, one request's full PHID": f"{requests}?q={request_phid}",
        "admin search, an object's PHID (bounded)": f"{requests}?q={newest_object}",
        "admin attempt list": "/admin/delivery_status/deliveryattempt/",
        "/api/webhook/stats": "/api/webhook/stats",
        "/api/webhook/health": "/api/webhook/health",
        "/api/webhook/hooks": "/api/webhook/hooks",
        "/metrics": "/metrics",
    }
    headers = {"X-Service-Token": os.environ["GORGE_SERVICE_TOKEN"]}
    for name, url in urls.items():
        timings = []
        for attempt in range(rounds + 1):
            COLLECTOR.forget()
            begin = time.perf_counter()
            response = client.get(url, headers=headers)
            elapsed = (time.perf_counter() - begin) * 1000
            if response.status_code != 200:
                raise SystemExit(f"{url}: HTTP {response.status_code}")
            if attempt:
                timings.append(elapsed)
        figures[f"ms {name}"] = statistics.median(timings)
    for name in ("dashboard /", "/api/webhook/stats"):
        # Per view, over COST_VIEWS of them: MariaDB books a session's statements a statement late, and the
        # first after FLUSH USER_STATISTICS may fall before it; SELECT 1 before and after takes both up.
        user_stats.reset()
        with connections["phorge"].cursor() as cursor:
            cursor.execute("SELECT 1")
        for _ in range(COST_VIEWS):
            COLLECTOR.forget()
            client.get(urls[name], headers=headers)
        with connections["phorge"].cursor() as cursor:
            cursor.execute("SELECT 1")
        booked = user_stats.read(name)
        figures[f"statements {name}"] = (booked[f"statements {name}"] - 2) / COST_VIEWS
        figures[f"rows read {name}"] = booked[f"rows read {name}"] / COST_VIEWS
    if kept:  # a refresh of the counts as a worker makes it, with nothing changed
        user_stats.reset()
        _keep_counts(settings.GORGE_WEBHOOK)
        figures.update(user_stats.read("refresh, nothing changed"))
    return figures


def _keep_counts(config: Any) -> bool:  # pragma: no cover - runs in the measuring process
    """The counts refreshed until complete, as a running worker keeps them; False for a tree without them."""
    try:
        from webhook_delivery.reads import counts
        from webhook_delivery.records.models import HeraldTally
    except ImportError:
        return False
    while True:
        HeraldTally.objects.update(next_at=None)
        done = counts.refresh(config, role="bench")
        if done is None or done.complete:
            return True


class _UserStats:  # pragma: no cover - runs in the measuring process
    """MariaDB's per-user statistics of the herald connection's user (bench/dbcost.py made it)."""

    def __init__(self, given: dict[str, Any]) -> None:
        self.user = given["user"]
        self.admin = given["admin"]

    def _run(self, sql: str, params: Any = None) -> Any:
        import MySQLdb

        admin = MySQLdb.connect(
            host=self.admin["host"],
            port=int(self.admin["port"]),
            user=self.admin["user"],
            passwd=self.admin["password"],
        )
        try:
            cursor = admin.cursor()
            cursor.execute(sql, params)
            return cursor.fetchone()
        finally:
            admin.close()

    def reset(self) -> None:
        self._run("FLUSH USER_STATISTICS")

    def read(self, name: str) -> dict[str, float]:
        found = self._run(
            "SELECT SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS, ROWS_READ "
            "FROM information_schema.USER_STATISTICS WHERE USER = %s",
            (self.user,),
        ) or (0, 0)
        return {f"statements {name}": float(found[0]), f"rows read {name}": float(found[1])}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--turns", type=int, default=3, help="each size measured this many times, in turns")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(_measure(args.measure, args.rounds)))
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    found = measure_sizes(sizes, args.rounds, args.turns, log=lambda text: print(text, file=sys.stderr))
    print(json.dumps({"buffer_pool_mb": buffer_pool_mb(), "sizes": [found[size] for size in sizes]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
