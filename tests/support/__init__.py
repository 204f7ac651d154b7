"""What the tests share: receivers, servers, seeders, processes and the test settings; fixtures are in
tests/conftest.py."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
