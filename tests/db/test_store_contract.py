"""The store contract (tests/support/store_contract.py) on store.Store in each of its ways to write: over
Phorge's real tables on MariaDB (the clock fixed with the session's own `SET timestamp`), on its own
connection and through a session pool, and on SQLite as the demo runs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.store_contract import OnMariaDB, OnPooledMariaDB, OnSQLite, StoreContract


@PHORGE_DB
class TestOnMariaDB(StoreContract):
    @pytest.fixture
    def seeded(self, phorge: Phorge) -> Iterator[OnMariaDB]:
        store = OnMariaDB(phorge)
        yield store
        store.clock.release()


@PHORGE_DB
class TestOnPooledMariaDB(StoreContract):
    @pytest.fixture
    def seeded(self, phorge: Phorge) -> Iterator[OnPooledMariaDB]:
        store = OnPooledMariaDB(phorge)
        yield store
        store.clock.release()
        store.pool.close()


class TestOnSQLite(StoreContract):
    @pytest.fixture
    def seeded(self, tmp_path: Path, django_db_blocker: Any) -> Iterator[OnSQLite]:
        with django_db_blocker.unblock():
            store = OnSQLite(tmp_path)
            try:
                yield store
            finally:
                store.close()
