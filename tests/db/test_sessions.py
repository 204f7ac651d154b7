"""worker/sessions.py on MariaDB: the pool's own statements are escaped exactly as MySQLdb escapes them (its
`literal()`, and a cursor's statement), whatever a value holds; a connection that takes several statements
in one round trip is never lent to Django; a result write and the next claim still go in one round trip."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import MySQLdb
import pytest
from django.db import ProgrammingError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.waiting import wait_for
from webhook_delivery.config import PHORGE_ALIAS
from webhook_delivery.phorge.columns import positional
from webhook_delivery.worker.sessions import SessionPool, Statement, _literal
from webhook_delivery.worker.store import Store

# What an attacker would try in a value: quotes, backslashes, the statement separator, comments, NUL, ^Z,
# the driver's own placeholders, and text outside the Basic Multilingual Plane.
PIECES = ["'", '"', "\\", ";", "--", "#", "/*", "*/", "\x00", "\x1a", "\n", "\r", "%", "%s", "%(x)s", "`", "\\'"]
HOSTILE = st.lists(
    st.one_of(st.sampled_from(PIECES), st.characters(codec="utf-8", exclude_categories=["Cs"])), max_size=30
).map("".join)
VALUES = st.one_of(
    HOSTILE,
    st.integers(min_value=-(2**63), max_value=2**64),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.binary(max_size=20),
)
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
STATEMENT = "UPDATE herald_webhookrequest SET properties = %(value)s WHERE id = %(id)s AND phid <> %(other)s"


@pytest.fixture
def pool(phorge: Phorge) -> Iterator[SessionPool]:
    pool = SessionPool(PHORGE_ALIAS, 4)
    yield pool
    pool.close()


def _driver(pool: SessionPool) -> Any:
    with pool.connection() as wrapper:
        wrapper.ensure_connection()
        return wrapper.connection


@PHORGE_DB
@EXAMPLES
@given(value=VALUES)
def test_a_value_is_escaped_as_the_driver_escapes_it(pool: SessionPool, value: Any) -> None:
    driver = _driver(pool)
    assert _literal(driver, value) == driver.literal(value)


@PHORGE_DB
@EXAMPLES
@given(value=HOSTILE, other=HOSTILE, row_id=st.integers(min_value=0, max_value=2**63 - 1))
def test_a_statement_is_bound_as_a_cursor_binds_it(pool: SessionPool, value: str, other: str, row_id: int) -> None:
    params = {"value": value, "id": row_id, "other": other}
    with pool.connection() as wrapper, wrapper.cursor() as cursor:
        driver = wrapper.connection
        assert Statement(STATEMENT, params).bound(driver).decode(driver.encoding) == cursor.mogrify(
            *positional(STATEMENT, params)
        )


@PHORGE_DB
def test_text_the_connection_cannot_encode_is_refused_as_the_driver_refuses_it(pool: SessionPool) -> None:
    driver = _driver(pool)
    for call in (driver.literal, lambda value: _literal(driver, value)):
        with pytest.raises(UnicodeEncodeError):
            call("lone \udc80 surrogate")


@PHORGE_DB
@EXAMPLES
@given(first=HOSTILE, second=HOSTILE)
def test_hostile_text_is_stored_as_it_is_and_never_runs_as_a_statement(
    phorge: Phorge, pool: SessionPool, first: str, second: str
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    ids = [int(phorge.row(phorge.request(hook, properties="{}"))["id"]) for _ in range(3)]
    canary = phorge.row(phorge.request(hook, properties="canary"))
    assert pool.change(STATEMENT, {"value": first, "id": ids[0], "other": ""}) == (1, 0)
    both = pool.change_twice(
        (STATEMENT, {"value": second, "id": ids[1], "other": first}),
        (STATEMENT, {"value": first + second, "id": ids[2], "other": second}),
    )
    assert both == ((1, 0), (1, 0)), "each statement matched its one row"
    stored = dict(phorge.execute("SELECT id, properties FROM herald_webhookrequest WHERE id IN %s", (ids,)))
    assert [_text(stored[row_id]) for row_id in ids] == [first, second, first + second]
    assert phorge.row(canary["phid"]) == canary, "no other row was touched"
    phorge.clear()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _takes_two_statements(wrapper: Any) -> bool:
    with wrapper.cursor() as cursor:
        try:
            cursor.execute("SELECT 1; SELECT 2")
        except ProgrammingError:
            return False
        while cursor.nextset():
            pass
        return True


@PHORGE_DB
@pytest.mark.parametrize("size", [1, 2, 4])
def test_no_connection_lent_to_django_takes_a_second_statement(phorge: Phorge, size: int) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    row_id = int(phorge.row(phorge.request(hook, properties="{}"))["id"])
    pool = SessionPool(PHORGE_ALIAS, size)
    try:
        write = (STATEMENT, {"value": "a", "id": row_id, "other": ""})
        for _ in range(3):
            assert pool.change_twice(write, write) == ((1, 0), (1, 0))
            assert not _takes_two_statements_on_one_lent(pool)
        with ExitStack() as lent:
            wrappers = [lent.enter_context(pool.connection()) for _ in pool.lent]
            assert not any(_takes_two_statements(wrapper) for wrapper in wrappers)
        assert pool.batches == (size > 1), "a pool of one connection lends it and keeps none"
        assert len(pool.lent) == size - size // 2
    finally:
        pool.close()


@PHORGE_DB
def test_no_connection_of_djangos_takes_a_second_statement(phorge: Phorge) -> None:
    """mysqlclient's default is to take them: the settings turn that off for every MariaDB/MySQL alias."""
    assert not _takes_two_statements(phorge.connection)


def _takes_two_statements_on_one_lent(pool: SessionPool) -> bool:
    with pool.connection() as wrapper:
        return _takes_two_statements(wrapper)


@contextmanager
def statements_sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """Every statement the driver sends while the block runs, as sent."""
    sent: list[bytes] = []
    query = MySQLdb.connections.Connection.query

    def counted(connection: Any, statement: bytes) -> Any:
        sent.append(statement)
        return query(connection, statement)

    with monkeypatch.context() as patched:
        patched.setattr(MySQLdb.connections.Connection, "query", counted)
        yield sent


@PHORGE_DB
def test_a_result_write_and_the_next_claim_are_one_round_trip(
    phorge: Phorge, pool: SessionPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    first, second = (phorge.snapshot(phorge.request(hook, created=phorge.now() - 10)) for _ in range(2))
    store = Store(pool=pool)
    version = store.claim(first, lease=60, retry_backoff=300)
    assert version is not None
    with statements_sent(monkeypatch) as sent:
        written, claimed, known = store.write_then_claim(
            (first.id, version), ("sent", "okay", True, None), second, lease=60, retry_backoff=300
        )
    assert written is not None and claimed is not None and known
    assert len(sent) == 1 and sent[0].count(b"UPDATE ") == 2, "two statements, one round trip"


@PHORGE_DB
def test_with_every_kept_connection_busy_a_write_and_a_claim_go_on_a_lent_one_one_at_a_time(
    phorge: Phorge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claims and writes of a backlog's many jobs use every connection (issue 42's bench: with only the
    kept half, a 100-hook backlog drained at 0.81x), and a lent connection still takes one statement at a time."""
    hook = phorge.hook("http://127.0.0.1:9/x")
    phid = phorge.request(hook, properties="{}")
    row_id = int(phorge.row(phid)["id"])
    pool = SessionPool(PHORGE_ALIAS, 4)
    try:
        busy = [threading.Thread(target=pool.change, args=("DO SLEEP(3)", {})) for _ in pool.kept]
        for thread in busy:
            thread.start()
        wait_for(lambda: _sleeping(phorge) == len(busy), 10, "every kept connection in its SLEEP")
        write = (STATEMENT, {"value": "b", "id": row_id, "other": ""})
        with statements_sent(monkeypatch) as sent:
            assert pool.change_twice(write, write) == ((1, 0), (1, 0))
        updates = [statement for statement in sent if statement.startswith(b"UPDATE")]  # not a new connection's
        assert len(updates) == 2 and not any(b";" in statement for statement in updates)
        for thread in busy:
            thread.join()
        assert not _takes_two_statements_on_one_lent(pool)
        assert phorge.row(phid)["properties"] == "b"
    finally:
        pool.close()


def _sleeping(phorge: Phorge) -> int:
    with phorge.connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP(%%'")
        return int(cursor.fetchone()[0])
