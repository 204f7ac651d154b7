"""The bench's own herald databases on the test MariaDB: Phorge's DDL, hooks, queued rows, retained history."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Any

import MySQLdb

from bench.common import BenchError, connect
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.payload import build_payload, sign, transactions_newest_first
from webhook_delivery.sql import PHORGE_SCHEMA

TRANSACTIONS_PER_ROW = 6  # brings the payload to ~600 bytes, the size the reference rate uses
HISTORY_HOOKS = 16
WEEK = 7 * 86400


def create_table_statements() -> list[str]:
    """The CREATE TABLE statements of Phorge's dump, checked to be the two herald tables."""
    statements = seeding.herald_ddl()
    if len(statements) != 2:
        raise BenchError(f"expected herald_webhook and herald_webhookrequest in {PHORGE_SCHEMA}, got {len(statements)}")
    return statements


@dataclass(frozen=True)
class Hook:
    phid: str
    key: str
    uri: str


@dataclass(frozen=True)
class Request:
    """A queued row as seeded, enough to know the exact bytes (and so the signature) the receiver must see."""

    phid: str
    hook: Hook
    object_phid: str
    properties: str
    created: int

    def body(self) -> bytes:
        properties = json.loads(self.properties)
        return build_payload(
            object_phid=self.object_phid,
            properties=properties,
            date_created=self.created,
            transaction_phids=transactions_newest_first(properties["transactionPHIDs"]),
        )

    def signature(self) -> str:
        return sign(self.body(), self.hook.key)


class HeraldDB:
    def __init__(self, name: str) -> None:
        self.name = name
        self.connection: Any = None
        self._rng = random.Random()

    def cursor(self) -> Any:
        if self.connection is None:
            self.connection = connect(self.name)
        return self.connection.cursor()

    def exists(self) -> bool:
        admin = connect()
        try:
            cursor = admin.cursor()
            cursor.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = %s", (self.name,))
            return bool(cursor.fetchone()[0])
        finally:
            admin.close()

    def create(self) -> None:
        self.close()
        admin = connect()
        try:
            cursor = admin.cursor()
            cursor.execute(f"DROP DATABASE IF EXISTS `{self.name}`")
            cursor.execute(f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            cursor.execute(f"USE `{self.name}`")
            for statement in create_table_statements():
                cursor.execute(statement)
        finally:
            admin.close()

    def drop(self) -> None:
        self.close()
        admin = connect()
        try:
            admin.cursor().execute(f"DROP DATABASE IF EXISTS `{self.name}`")
        finally:
            admin.close()

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def execute(self, sql: str, params: Any = None) -> Any:
        cursor = self.cursor()
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else cursor.rowcount

    def now(self) -> int:
        return int(self.execute("SELECT UNIX_TIMESTAMP()")[0][0])

    def clear(self) -> None:
        self.execute("TRUNCATE TABLE herald_webhookrequest")
        self.execute("TRUNCATE TABLE herald_webhook")

    def add_hook(self, uri: str, *, name: str = "bench") -> Hook:
        row = seeding.hook_row(uri, now=self.now(), name=name)
        seeding.insert(self.cursor(), seeding.HOOK_TABLE, [row])
        return Hook(row["phid"], row["hmacKey"], uri)

    def hooks(self) -> list[Hook]:
        rows = self.execute("SELECT phid, hmacKey, webhookURI FROM herald_webhook ORDER BY id")
        return [Hook(_text(phid), _text(key), _text(uri)) for phid, key, uri in rows]

    def set_hook_uri(self, phid: str, uri: str) -> Hook:
        self.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", (uri, phid))
        return next(hook for hook in self.hooks() if hook.phid == phid)

    def new_request(self, hook: Hook, created: int) -> Request:
        """One queued row the way Phorge writes it (not inserted)."""
        # Not secrets.choice as seeding.random_phid: thousands of rows per figure, and these need no secrecy.
        xactions = [
            "PHID-XACT-TASK-" + "".join(self._rng.choices(seeding.PHID_ALPHABET, k=15))
            for _ in range(TRANSACTIONS_PER_ROW)
        ]
        properties = seeding.properties(retry="forever", transactions=xactions, triggers=[hook.phid])
        return Request(seeding.random_phid("HWBR"), hook, seeding.random_phid("TASK"), properties, created)

    def insert(self, requests: list[Request]) -> None:
        rows = [
            seeding.request_row(r.hook.phid, r.properties, now=r.created, phid=r.phid, object_phid=r.object_phid)
            for r in requests
        ]
        seeding.insert(self.cursor(), seeding.REQUEST_TABLE, rows)

    def seed(self, hooks: list[Hook], count: int) -> list[Request]:
        """`count` queued rows spread round-robin over `hooks`, all created now."""
        now = self.now()
        requests = [self.new_request(hooks[i % len(hooks)], now) for i in range(count)]
        self.insert(requests)
        return requests

    def add_stuck_request(self, hook: Hook, *, created: int) -> int:
        """A retry-forever request of a broken hook: failed a moment ago, queued, not due for the backoff."""
        now = self.now()
        properties = seeding.properties(
            retry="forever", triggers=[hook.phid], flags=False, errorType="http", errorCode=500
        )
        row = seeding.request_row(hook.phid, properties, now=created, result="fail", epoch=now - 5, modified=now - 5)
        cursor = self.cursor()
        seeding.insert(cursor, seeding.REQUEST_TABLE, [row])
        return int(cursor.lastrowid)

    def refresh_stuck_request(self, row_id: int) -> None:
        """Keep the broken hook's request inside its retry backoff (a failed attempt seconds ago)."""
        self.execute(
            "UPDATE herald_webhookrequest SET lastRequestEpoch = UNIX_TIMESTAMP() - 5, "
            "dateModified = UNIX_TIMESTAMP() - 5 WHERE id = %s AND status = 'queued'",
            (row_id,),
        )

    def outcome_counts(self, *, above_id: int = 0) -> dict[tuple[str, str], int]:
        rows = self.execute(
            "SELECT status, lastRequestResult, COUNT(*) FROM herald_webhookrequest WHERE id > %s "
            "GROUP BY status, lastRequestResult",
            (above_id,),
        )
        return {(_text(status), _text(result)): int(count) for status, result, count in rows}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


# -- one million retained rows ---------------------------------------------------------------------


@dataclass(frozen=True)
class History:
    """The cached history database: `rows` sent rows above one stuck request (id 1) of a broken hook."""

    db: HeraldDB
    hooks: list[Hook]
    broken: Hook
    stuck_id: int
    base_max_id: int
    built_now: bool
    build_seconds: float


def _history_is_intact(db: HeraldDB, rows: int) -> bool:
    try:
        hooks = db.execute("SELECT COUNT(*) FROM herald_webhook")[0][0]
        stuck = db.execute("SELECT status, webhookPHID FROM herald_webhookrequest WHERE id = 1")
        retained = db.execute("SELECT COUNT(*) FROM herald_webhookrequest WHERE id > 1 AND id <= %s", (rows + 1,))[0][0]
    except MySQLdb.Error:  # a missing table or an old layout: rebuild
        return False
    return hooks == HISTORY_HOOKS + 1 and len(stuck) == 1 and _text(stuck[0][0]) == "queued" and retained == rows


def ensure_history(name: str, rows: int, *, log: Any) -> History:
    """Reuse `name` when it holds exactly the expected history; otherwise build it (minutes, once)."""
    db = HeraldDB(name)
    built_now = False
    started = time.monotonic()
    if not (db.exists() and _history_is_intact(db, rows)):
        log(f"building {name}: {rows:,} retained sent rows (first run only, cached afterwards)")
        _build_history(db, rows, log=log)
        built_now = True
    base_max_id = rows + 1
    # Rows a previous run left above the history (crash, Ctrl-C) go; ids continue right after it.
    db.execute("DELETE FROM herald_webhookrequest WHERE id > %s", (base_max_id,))
    db.execute("ALTER TABLE herald_webhookrequest AUTO_INCREMENT = 1")
    hooks = db.hooks()
    broken = hooks[0]
    db.refresh_stuck_request(1)
    return History(db, hooks[1:], broken, 1, base_max_id, built_now, time.monotonic() - started)


def _insert_generated(
    db: HeraldDB,
    rows: int,
    hooks: list[Hook],
    *,
    first_id: int,
    tag: str,
    status: str,
    properties_tail: str,
    created: str,
    result: str,
    log: Any = None,
    properties: str | None = None,
) -> None:
    """`rows` requests generated in SQL, round-robin over `hooks`, in chunks. `created` is each row's
    dateCreated as SQL of `seq`; `result` its lastRequestResult, lastRequestEpoch, dateCreated, dateModified
    as SQL of `created`; `status`, and `properties` when given, SQL of `seq` and `hook`. Explicit ids from
    `first_id`: InnoDB reserves auto-increment ranges for INSERT ... SELECT and would leave gaps between
    chunks."""
    choose_hook = "ELT(1 + seq % {n}, {phids})".format(n=len(hooks), phids=", ".join(f"'{h.phid}'" for h in hooks))
    xaction = "CONCAT('PHID-XACT-TASK-', LPAD(seq * 10 + {i}, 15, '0'))"
    xactions = ", '\",\"', ".join(xaction.format(i=i) for i in range(TRANSACTIONS_PER_ROW))
    properties = properties or (
        f'CONCAT(\'{{"retry":"forever","transactionPHIDs":["\', {xactions}, \'"],"triggerPHIDs":["\', hook, '
        f'\'"],"silent":false,"secure":false{properties_tail}}}\')'
    )
    chunk = 100_000
    for low in range(1, rows + 1, chunk):
        high = min(rows, low + chunk - 1)
        db.execute(
            f"""INSERT INTO herald_webhookrequest (id, phid, webhookPHID, objectPHID, status, properties,
                lastRequestResult, lastRequestEpoch, dateCreated, dateModified)
            SELECT seq + {first_id - 1}, CONCAT('PHID-HWBR-{tag}', LPAD(seq, 19, '0')), hook,
                CONCAT('PHID-TASK-{tag}', LPAD(seq, 19, '0')), {status}, {properties}, {result}
            FROM (SELECT seq, {choose_hook} AS hook, {created} AS created FROM seq_{low}_to_{high}) AS generated
            ORDER BY seq"""
        )
        if log is not None:
            log(f"  {high:,} / {rows:,} rows")


def _build_history(db: HeraldDB, rows: int, *, log: Any) -> None:
    db.create()
    broken = db.add_hook("http://127.0.0.1:9/fail/", name="broken")
    hooks = [db.add_hook(f"http://127.0.0.1:9/h{i}", name=f"hook {i}") for i in range(HISTORY_HOOKS)]
    now = db.now()
    if db.add_stuck_request(broken, created=now - WEEK) != 1:
        raise BenchError(f"{db.name}: the stuck request must be the first row")
    # A week of history, oldest first, each row as Phorge leaves it after a successful attempt.
    _insert_generated(
        db,
        rows,
        hooks,
        first_id=2,
        tag="h",
        status="'sent'",
        properties_tail=',"errorType":"http","errorCode":200',
        created=f"{now - WEEK} + (seq * {WEEK - 60}) DIV {rows}",
        result="'okay', created + 1, created, created + 1",
        log=log,
    )
    db.execute("ANALYZE TABLE herald_webhookrequest")


# -- a queued backlog (after an outage) ------------------------------------------------------------

BACKLOG_HOOKS = 100
_SENT_SUFFIX = ',"errorType":"http","errorCode":200}'


@dataclass(frozen=True)
class Backlog:
    """The backlog database: `rows` queued, due, never attempted `retry=forever` requests over 100 hooks."""

    db: HeraldDB
    hooks: list[Hook]
    built_now: bool
    build_seconds: float


def ensure_backlog(name: str, rows: int, *, log: Any) -> Backlog:
    """Reuse `name` when it holds exactly the expected backlog (put back as it was); otherwise build it."""
    db = HeraldDB(name)
    started = time.monotonic()
    built_now = False
    if db.exists():
        try:
            reset_backlog(db)
            intact = db.execute("SELECT COUNT(*) FROM herald_webhook")[0][0] == BACKLOG_HOOKS and db.execute(
                "SELECT COUNT(*), SUM(status = 'queued' AND lastRequestResult = 'none') FROM herald_webhookrequest"
            )[0] == (rows, rows)
        except MySQLdb.Error:
            intact = False
    else:
        intact = False
    if not intact:
        log(f"building {name}: {rows:,} queued requests over {BACKLOG_HOOKS} hooks (cached afterwards)")
        db.create()
        hooks = [db.add_hook(f"http://127.0.0.1:9/b{i}", name=f"backlog {i}") for i in range(BACKLOG_HOOKS)]
        created = db.now() - 3600
        _insert_generated(
            db,
            rows,
            hooks,
            first_id=1,
            tag="q",
            status="'queued'",
            properties_tail="",
            created=str(created),
            result="'none', 0, created, created",
        )
        db.execute("ANALYZE TABLE herald_webhookrequest")
        built_now = True
    return Backlog(db, db.hooks(), built_now, time.monotonic() - started)


def reset_backlog(db: HeraldDB) -> None:
    """Put delivered rows back as they were seeded: queued, untouched, properties without the outcome."""
    db.execute(
        "UPDATE herald_webhookrequest SET status = 'queued', lastRequestResult = 'none', lastRequestEpoch = 0, "
        "dateModified = dateCreated, properties = REPLACE(properties, %s, '}') "
        "WHERE status <> 'queued' OR dateModified <> dateCreated OR lastRequestResult <> 'none'",
        (_SENT_SUFFIX,),
    )


def requests_with_status(db: HeraldDB, status: str) -> list[Request]:
    """The rows in `status` as Requests (to rebuild the signature the receiver must have seen)."""
    hooks = {hook.phid: hook for hook in db.hooks()}
    rows = db.execute(
        "SELECT phid, webhookPHID, objectPHID, properties, dateCreated FROM herald_webhookrequest WHERE status = %s",
        (status,),
    )
    return [
        Request(_text(phid), hooks[_text(hook)], _text(obj), _text(properties), int(created))
        for phid, hook, obj, properties, created in rows
    ]
