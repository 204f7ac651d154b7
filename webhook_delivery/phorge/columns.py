"""Rows read by column name and statements written with named parameters: a SELECT list kept as names
beside its SQL, fetched tuples zipped back to those names, `%(name)s` handed to the driver by position, and
IN lists. The one way every module that talks SQL to Phorge builds its statements. Pure: nothing here
connects."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from operator import itemgetter
from typing import Any

Record = dict[str, Any]

_NAMED = re.compile(r"%\((\w+)\)s")


@lru_cache(maxsize=512)
def positional_sql(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with each `%(name)s` as `%s`, and the names in their order."""
    return _NAMED.sub("%s", sql), tuple(_NAMED.findall(sql))


def positional(sql: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """`sql` with each `%(name)s` as `%s`, and the values in their order. Statements are written with names;
    the driver gets positions, because MySQLdb encodes and escapes a dict's keys on every call."""
    text, names = positional_sql(sql)
    return text, [params[name] for name in names]


def in_filter(column: str, values: Sequence[Any], name: str) -> tuple[str, dict[str, Any]]:
    """`column IN (%(name0)s, ...)` and its parameters; `1 = 0` for no values (an empty IN is not SQL)."""
    if not values:
        return "1 = 0", {}
    params = {f"{name}{index}": value for index, value in enumerate(values)}
    return f"{column} IN (" + ", ".join(f"%({key})s" for key in params) + ")", params


@dataclass(frozen=True)
class Columns:
    """A SELECT list: `sql` is its text, `read` turns one fetched row into {name: value}.

    The names never reach the SQL (no aliases), so a statement built from `sql` is the one written by hand.
    """

    names: tuple[str, ...]
    expressions: tuple[str, ...]

    @classmethod
    def of(cls, *columns: str, **expressions: str) -> Columns:
        """Columns selected under their own name, then `name=expression` pairs, in that order."""
        return cls((*columns, *expressions), (*columns, *expressions.values()))

    def plus(self, *columns: str, **expressions: str) -> Columns:
        """This list followed by more columns (as for `of`)."""
        more = Columns.of(*columns, **expressions)
        return Columns(self.names + more.names, self.expressions + more.expressions)

    @cached_property
    def sql(self) -> str:
        return ", ".join(self.expressions)

    def read(self, row: Sequence[Any]) -> Record:
        """One fetched row by name; a row of another length is a bug in the statement, hence strict."""
        return dict(zip(self.names, row, strict=True))

    def read_all(self, rows: Iterable[Sequence[Any]]) -> list[Record]:
        return [self.read(row) for row in rows]

    def picker(self, *names: str) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
        """Reads just `names` (two or more), in that order, from fetched rows: for rows read by the
        thousand, where a dict per row would cost more than the row."""
        if len(names) < 2:
            raise ValueError("picker() takes two or more names")
        return itemgetter(*(self.names.index(name) for name in names))
