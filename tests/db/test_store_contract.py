"""The store contract (tests/support/store_contract.py) on store.Store over Phorge's real tables, the clock
fixed with the session's own `SET timestamp`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.store_contract import OnMariaDB, OnPooledMariaDB, StoreContract


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
