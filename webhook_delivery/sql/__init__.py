"""Phorge's own DDL, as its `bin/storage upgrade` creates it (MariaDB dumps): the herald tables (the demo's
SQLite database and the tests' MariaDB one), and the tables of Phorge's other databases that the service
may read (the tests). Never run against Phorge's databases: Phorge owns its schema."""

from pathlib import Path

PHORGE_SCHEMA = Path(__file__).with_name("schema.sql")
PHORGE_APP_SCHEMA = Path(__file__).with_name("app-schema.sql")
