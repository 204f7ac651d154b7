"""Phorge's MariaDB DDL for the herald tables, rewritten for SQLite. Pure, no Django.

Only what `bin/storage upgrade` produces for these tables is understood; anything else raises, so a
change in Phorge's schema stops the demo instead of being papered over. SQLite's default BINARY
collation compares bytes, like varbinary and utf8mb4_bin, so every text column becomes TEXT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CREATE = re.compile(r"CREATE TABLE `(?P<table>\w+)` \((?P<body>.*?)\n\)[^;]*;", re.DOTALL)
_COLUMN = re.compile(r"^`(?P<name>\w+)` (?P<type>[a-z]+)(?:\((?P<size>\d+)\))?(?P<rest>.*)$")
_KEY = re.compile(r"^(?P<kind>PRIMARY KEY|UNIQUE KEY|KEY) (?:`(?P<name>\w+)` )?\((?P<columns>[^)]*)\)$")
_INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint"}
_TEXT_TYPES = {"char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext"}
_IGNORED_ATTRIBUTES = re.compile(r"\s*(CHARACTER SET \w+|COLLATE \w+)")


class UnsupportedDDLError(ValueError):
    """The MariaDB DDL contains something this translation does not know."""


@dataclass(frozen=True)
class Column:
    name: str
    sql: str


def _quote(name: str) -> str:
    return f'"{name}"'


def _column(line: str, auto_increment: set[str]) -> Column:
    match = _COLUMN.match(line)
    if match is None:
        raise UnsupportedDDLError(f"cannot read column definition: {line}")
    name, kind, size = match["name"], match["type"], match["size"]
    rest = _IGNORED_ATTRIBUTES.sub("", match["rest"]).strip()
    unsigned = rest.startswith("unsigned")
    rest = rest.removeprefix("unsigned").strip()
    if "AUTO_INCREMENT" in rest:
        auto_increment.add(name)
        rest = rest.replace("AUTO_INCREMENT", "").strip()
    if rest not in {"NOT NULL", "NULL", ""}:
        raise UnsupportedDDLError(f"column {name}: unsupported attributes {rest!r}")
    not_null = " NOT NULL" if rest == "NOT NULL" else ""
    checks = []
    if kind in _INTEGER_TYPES:
        sql_type = "INTEGER"
        if unsigned:
            checks.append(f"{_quote(name)} >= 0")
    elif kind in _TEXT_TYPES:
        sql_type = "TEXT"
        if size is not None:
            # binary types count bytes, character types count characters, as in MariaDB
            measured = f"CAST({_quote(name)} AS BLOB)" if "binary" in kind else _quote(name)
            checks.append(f"length({measured}) <= {int(size)}")
    else:
        raise UnsupportedDDLError(f"column {name}: unsupported type {kind!r}")
    check = "".join(f" CHECK ({c})" for c in checks)
    return Column(name, f"{_quote(name)} {sql_type}{not_null}{check}")


def translate(mariadb_ddl: str) -> list[str]:
    """SQLite statements (tables, then indexes) for every CREATE TABLE in a mysqldump file."""
    statements: list[str] = []
    for table in _CREATE.finditer(mariadb_ddl.split("-- Dump completed", 1)[0]):
        name = table["table"]
        columns: list[Column] = []
        auto_increment: set[str] = set()
        primary: list[str] = []
        indexes: list[str] = []
        for raw in table["body"].splitlines():
            line = raw.strip().rstrip(",")
            if not line:
                continue
            if line.startswith("`"):
                columns.append(_column(line, auto_increment))
                continue
            key = _KEY.match(line)
            if key is None:
                raise UnsupportedDDLError(f"table {name}: cannot read {line!r}")
            key_columns = [c.strip().strip("`") for c in key["columns"].split(",")]
            if key["kind"] == "PRIMARY KEY":
                primary = key_columns
                continue
            unique = "UNIQUE " if key["kind"] == "UNIQUE KEY" else ""
            indexes.append(
                f"CREATE {unique}INDEX {_quote(name + '_' + key['name'])} ON {_quote(name)} "
                f"({', '.join(_quote(c) for c in key_columns)})"
            )
        definitions = []
        for column in columns:
            if column.name in auto_increment:
                if primary != [column.name]:
                    raise UnsupportedDDLError(f"table {name}: AUTO_INCREMENT on a column that is not the primary key")
                definitions.append(column.sql.replace(" NOT NULL", " NOT NULL PRIMARY KEY AUTOINCREMENT", 1))
            else:
                definitions.append(column.sql)
        if primary and not auto_increment:
            definitions.append(f"PRIMARY KEY ({', '.join(_quote(c) for c in primary)})")
        statements.append(f"CREATE TABLE {_quote(name)} (\n  " + ",\n  ".join(definitions) + "\n)")
        statements.extend(indexes)
    if not statements:
        raise UnsupportedDDLError("no CREATE TABLE statement found")
    return statements
