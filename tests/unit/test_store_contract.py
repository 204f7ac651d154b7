"""The store contract (tests/support/store_contract.py) on the in-memory twin, twins.MemoryStore."""

from __future__ import annotations

import pytest

from tests.support.store_contract import OnMemory, StoreContract


class TestOnMemory(StoreContract):
    @pytest.fixture
    def seeded(self) -> OnMemory:
        return OnMemory()
