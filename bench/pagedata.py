"""The large install of the pages figure (figure 12): a herald database and an attempt log as a week of a busy
Phorge leaves them, built once per size and reused.

* `gwbenchpg<tag>_herald` (namespace `gwbenchpg<tag>`): 100 hooks, `rows` requests created over the last 7
  days (ids in creation order, round-robin over the hooks), generated in SQL from MariaDB's sequence engine.
  Of every 1,000 consecutive requests: 970 sent, 20 failed after an attempt (http/500), 5 failed without a
  call (hook/uri), 5 queued, retrying after a failed attempt a minute after it was created (retry-forever
  requests of hooks that have been failing all week): 97 % sent, 2.5 % failed, 0.5 % queued.
* the attempt log in a SQLite file (Django's own database, as the embedded default keeps it): as many
  attempts as requests over the same week, one per request, with the request's own outcome.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import PYTHON, TREE, BenchError, connect
from bench.herald import WEEK, HeraldDB, _insert_generated, _text

HOOKS = 100
MIX = "970 sent, 20 failed http/500, 5 failed hook/uri, 5 queued retrying (of every 1,000)"


def database_name(rows: int) -> str:
    return f"gwbenchpg{_tag(rows)}_herald"


def _tag(rows: int) -> str:
    return f"{rows // 1_000_000}m" if rows % 1_000_000 == 0 else f"{rows // 1000}k"


def _intact(db: HeraldDB, rows: int) -> bool:
    try:
        hooks = db.execute("SELECT COUNT(*) FROM herald_webhook")[0][0]
        top = db.execute("SELECT MAX(id), MIN(id) FROM herald_webhookrequest")[0]
        marker = db.execute("SELECT phid FROM herald_webhookrequest WHERE id = %s", (rows,))
    except Exception:  # noqa: BLE001 - a missing table or an old layout: rebuild
        return False
    return hooks == HOOKS and top == (rows, 1) and bool(marker) and _text(marker[0][0]).endswith(f"{rows:019d}")


def ensure_herald(rows: int, *, log: Any, name: str | None = None) -> tuple[HeraldDB, int]:
    """The herald database of this size (`name`, else the cached one), built on first use; and the epoch its
    week ends at."""
    db = HeraldDB(name or database_name(rows))
    if db.exists() and _intact(db, rows):
        return db, int(db.execute("SELECT MAX(dateCreated) FROM herald_webhookrequest")[0][0]) + 120
    log(f"building {db.name}: {rows:,} requests over {HOOKS} hooks, a week ({MIX})")
    db.create()
    hooks = [db.add_hook(f"http://127.0.0.1:9/p{i}", name=f"hook {i:03d}") for i in range(HOOKS)]
    end = db.now()
    kind = "seq % 1000"
    retry_epoch = "created + 60"
    outcome = (
        f'CASE WHEN {kind} < 5 THEN \',"errorType":"http","errorCode":503\' '
        f'WHEN {kind} < 25 THEN \',"errorType":"http","errorCode":500\' '
        f'WHEN {kind} < 30 THEN \',"errorType":"hook","errorCode":"uri"\' '
        'ELSE \',"errorType":"http","errorCode":200\' END'
    )
    result = f"CASE WHEN {kind} < 25 THEN 'fail' WHEN {kind} < 30 THEN 'none' ELSE 'okay' END"
    epoch = f"CASE WHEN {kind} < 5 THEN {retry_epoch} WHEN {kind} BETWEEN 25 AND 29 THEN 0 ELSE created + 1 END"
    modified = f"CASE WHEN {kind} < 5 THEN {retry_epoch} ELSE created + 1 END"
    _insert_generated(
        db,
        rows,
        hooks,
        first_id=1,
        tag="pg",
        status=f"CASE WHEN {kind} < 5 THEN 'queued' WHEN {kind} < 30 THEN 'failed' ELSE 'sent' END",
        properties_tail="",
        properties=(
            f"CONCAT('{{\"retry\":\"', IF({kind} < 5, 'forever', 'never'), "
            '\'","transactionPHIDs":["PHID-XACT-TASK-\', LPAD(seq, 15, \'0\'), \'"],"triggerPHIDs":["\', hook, '
            f'\'"],"silent":false,"secure":false\', {outcome}, \'}}\')'
        ),
        created=f"{end} - {WEEK} + (seq * {WEEK - 120}) DIV {rows}",
        result=f"{result}, {epoch}, created, {modified}",
        log=log,
    )
    db.execute("ANALYZE TABLE herald_webhookrequest")
    return db, end


def site_database(rows: int, cache: Path, env: dict[str, str], *, log: Any, database: str) -> Path:
    """Django's own database with `rows` attempts over the week, migrated by this tree; cached by size and by
    the migrations it was built with."""
    digest = hashlib.sha256(" ".join(_hook_phids(database)).encode())  # the attempts name these hooks
    for migration in sorted((TREE / "webhook_delivery").rglob("migrations/0*.py")):
        digest.update(migration.read_bytes())
    path = cache / f"pages-site-{_tag(rows)}-{digest.hexdigest()[:10]}.sqlite3"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    building = path.with_suffix(".building")
    building.unlink(missing_ok=True)
    log(f"building {path.name}: {rows:,} attempts in the attempt log")
    done = subprocess.run(
        [PYTHON, "manage.py", "migrate", "--verbosity", "0"],
        cwd=TREE,
        env={**env, "DATABASE_URL": f"sqlite:///{building}"},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"migrate of the pages' site database failed: {done.stderr[-2000:]}")
    _fill_attempts(building, rows, database)
    building.rename(path)
    return path


def _fill_attempts(path: Path, rows: int, database: str) -> None:
    hooks = _hook_phids(database)
    end = time.time()
    connection = sqlite3.connect(path)
    try:
        batch: list[tuple[Any, ...]] = []
        for seq in range(1, rows + 1):
            kind = seq % 1000
            result, error_type, code, status, http = (
                ("fail", "http", "503", "queued", 503)
                if kind < 5
                else ("fail", "http", "500", "failed", 500)
                if kind < 25
                else ("none", "hook", "uri", "failed", None)
                if kind < 30
                else ("okay", "http", "200", "sent", 200)
            )
            started = datetime.fromtimestamp(end - WEEK + seq * (WEEK - 120) / rows, UTC)
            batch.append(
                (
                    f"PHID-HWBR-pg{seq:019d}",
                    hooks[seq % HOOKS],
                    f"PHID-TASK-pg{seq:019d}",
                    started.isoformat(sep=" "),
                    12.5 + (seq % 97),
                    status,
                    result,
                    error_type,
                    code,
                    http,
                    2 if http else None,
                    0,
                    "bench",
                    "",
                )
            )
            if len(batch) == 50_000:
                _insert_attempts(connection, batch)
                batch = []
        _insert_attempts(connection, batch)
        connection.execute("ANALYZE")
        connection.commit()
    finally:
        connection.close()


def _insert_attempts(connection: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> None:
    connection.executemany(
        "INSERT INTO delivery_status_deliveryattempt (request_phid, hook_phid, object_phid, started_at, duration_ms, "
        "status, result, error_type, error_code, http_status, response_bytes, redirects, worker_id, response_prefix) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        batch,
    )
    connection.commit()


def _hook_phids(database: str) -> list[str]:
    admin = connect(database)
    try:
        cursor = admin.cursor()
        cursor.execute("SELECT phid FROM herald_webhook ORDER BY id")
        return [_text(phid) for (phid,) in cursor.fetchall()]
    finally:
        admin.close()
