"""Phorge's names of objects (T123, D45, rXYZabc123def456, P12, ...), read-only in its application databases,
for the pages, the admin and the alerts; and the other way, the PHIDs a typed monogram names.

The names are formatted by names.py from the object tables of objects.py (OBJECT_TABLES), the same tables
and grants: one SELECT per application for a whole batch of PHIDs, each on its application's master
(databases.Masters), cached NAME_CACHE_SEC per process. Nothing here raises: without a grant, on a master
this service cannot reach or that does not answer, on SQLite, or for a deleted object, there is no name
(the caller shows the PHID); a missing grant is said once in the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from django.db import DatabaseError

from . import names
from .columns import Record, in_filter
from .databases import UNREADABLE_RECHECK_SEC, Masters, MasterUnavailable, NoAccessError, OnceLog, qualified, select
from .herald import text
from .names import ById, CommitRef, ObjectName, Reference, Repository, RepositoryRef, UserRef
from .objects import OBJECT_TABLES
from .payload import phid_get_type

logger = logging.getLogger(__name__)

NAME_CACHE_SEC = 30.0
FAILED_RECHECK_SEC = 10.0  # after a database error, an application's names wait this long
CACHE_MAX = 20_000
BATCH = 500  # PHIDs per statement
TITLE_CHARS = 200  # titles are read and shown cut to this (a Maniphest title is a longtext)
SEARCH_TERMS = 10


def _title(value: object) -> str:
    shown = text(value)
    return shown if len(shown) <= TITLE_CHARS else shown[:TITLE_CHARS] + "…"


def _cut(column: str) -> str:
    return f"LEFT({column}, {TITLE_CHARS + 1})"


def _id_and(build: Callable[[int, str], ObjectName]) -> Callable[[Record], ObjectName]:
    return lambda row: build(int(row["id"]), _title(row["title"]))


def _repository(row: Record) -> Repository:
    return Repository(
        id=int(row["repo_id"]),
        callsign=text(row["callsign"]) or None,
        vcs=text(row["vcs"]),
        name=_title(row.get("repo_name")),
        slug=text(row.get("slug")) or None,
    )


def _commit(row: Record) -> ObjectName:
    return names.commit(_repository(row), text(row["identifier"]), _title(row["summary"]))


def _project(row: Record) -> ObjectName:
    milestone_of = None if row["milestone"] is None else _title(row["parent"])
    return names.project(int(row["id"]), _title(row["title"]), text(row["slug"]) or None, milestone_of)


@dataclass(frozen=True)
class _Reader:
    """How one PHID type's names are read: SELECT expressions by name over its object table `o` (and what
    `joins` adds, in the same database `{db}`), and how a row becomes the name."""

    columns: dict[str, str]
    name: Callable[[Record], ObjectName]
    joins: str = ""


_TITLED = {"id": "o.id", "title": _cut("o.title")}
_NAMED = {"id": "o.id", "title": _cut("o.name")}
_REPOSITORY_COLUMNS = {"repo_id": "o.id", "callsign": "o.callsign", "vcs": "o.versionControlSystem"}

# PHID type -> reader, for every type of OBJECT_TABLES (a test holds them together).
READERS: dict[str, _Reader] = {
    "TASK": _Reader(_TITLED, _id_and(names.task)),
    "DREV": _Reader(_TITLED, _id_and(names.revision)),
    "CMIT": _Reader(
        {
            "identifier": "o.commitIdentifier",
            "summary": _cut("o.summary"),
            "repo_id": "r.id",
            "callsign": "r.callsign",
            "vcs": "r.versionControlSystem",
        },
        _commit,
        "JOIN {db}.`repository` r ON r.id = o.repositoryID",
    ),
    "REPO": _Reader(
        {**_REPOSITORY_COLUMNS, "repo_name": _cut("o.name"), "slug": "o.repositorySlug"},
        lambda row: names.repository(_repository(row)),
    ),
    "PROJ": _Reader(
        {**_NAMED, "slug": "o.primarySlug", "milestone": "o.milestoneNumber", "parent": _cut("p.name")},
        _project,
        "LEFT JOIN {db}.`project` p ON p.phid = o.parentProjectPHID",
    ),
    "USER": _Reader(
        {"username": "o.userName", "real_name": _cut("o.realName")},
        lambda row: names.user(text(row["username"]), _title(row["real_name"])),
    ),
    "WIKI": _Reader({"slug": "o.slug"}, lambda row: names.phriction(text(row["slug"]))),
    "PSTE": _Reader(_TITLED, _id_and(names.paste)),
    "MOCK": _Reader(_NAMED, _id_and(names.mock)),
    "FILE": _Reader(_NAMED, _id_and(names.file)),
    "HWBH": _Reader(_NAMED, _id_and(names.webhook)),
    "BDGE": _Reader(_NAMED, _id_and(names.badge)),
    "CONP": _Reader(_TITLED, _id_and(names.conpherence)),
    "CDWN": _Reader(_TITLED, _id_and(names.countdown)),
    "DSHB": _Reader(_NAMED, _id_and(names.dashboard)),
    "LEGD": _Reader(_TITLED, _id_and(names.legalpad)),
    "POLL": _Reader({"id": "o.id", "title": _cut("o.question")}, _id_and(names.poll)),
}


def _by_application(phid_types: Iterable[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for phid_type in phid_types:
        grouped.setdefault(OBJECT_TABLES[phid_type].object_app, []).append(phid_type)
    return grouped


@dataclass
class _Cache:
    """PHID -> (expiry, name or None for no such object), bounded; shared by the threads of a process."""

    ttl: float
    clock: Callable[[], float]
    entries: dict[str, tuple[float, ObjectName | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, phids: Iterable[str]) -> tuple[dict[str, ObjectName | None], list[str]]:
        now = self.clock()
        found: dict[str, ObjectName | None] = {}
        missing: list[str] = []
        with self.lock:
            for phid in phids:
                entry = self.entries.get(phid)
                if entry is not None and entry[0] > now:
                    found[phid] = entry[1]
                else:
                    missing.append(phid)
        return found, missing

    def put(self, names_read: dict[str, ObjectName | None]) -> None:
        expires = self.clock() + self.ttl
        with self.lock:
            if len(self.entries) + len(names_read) > CACHE_MAX:
                now = self.clock()
                self.entries = {phid: entry for phid, entry in self.entries.items() if entry[0] > now}
                if len(self.entries) + len(names_read) > CACHE_MAX:
                    self.entries.clear()
            self.entries.update({phid: (expires, name) for phid, name in names_read.items()})


class ObjectNames:
    """Names Phorge's objects by PHID, and finds the PHIDs a monogram names; read-only, never raises."""

    def __init__(
        self,
        namespace: str,
        masters: Masters,
        *,
        ttl: float = NAME_CACHE_SEC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        qualified(namespace, "herald", "herald_webhook")  # checks the namespace once
        self.namespace = namespace
        self.masters = masters
        self._clock = clock
        self._cache = _Cache(ttl, clock)
        self._logged = OnceLog()
        self._unreadable: dict[str, float] = {}

    # -- PHID -> name --------------------------------------------------------------------------------

    def names(self, phids: Iterable[str]) -> dict[str, ObjectName]:
        """The name of each of these objects that Phorge still has and this service may read: one SELECT per
        application for the PHIDs not cached."""
        wanted = [phid for phid in dict.fromkeys(phids) if phid_get_type(phid) in READERS]
        found, missing = self._cache.get(wanted)
        by_type: dict[str, list[str]] = {}
        for phid in missing:
            by_type.setdefault(phid_get_type(phid), []).append(phid)
        for app, phid_types in _by_application(by_type).items():
            for start in range(0, max(len(by_type[t]) for t in phid_types), BATCH):
                batch = {t: by_type[t][start : start + BATCH] for t in phid_types if by_type[t][start : start + BATCH]}
                read = self._read_names(app, batch)
                if read is not None:
                    self._cache.put(read)
                    found.update(read)
        return {phid: name for phid, name in found.items() if name is not None}

    def _read_names(self, app: str, batch: dict[str, list[str]]) -> dict[str, ObjectName | None] | None:
        """The names of one application's objects, None for each that is gone; None when not read."""
        selects: list[str] = []
        params: dict[str, object] = {}
        all_names = list(dict.fromkeys(name for t in batch for name in READERS[t].columns))
        for number, (phid_type, phids) in enumerate(batch.items()):
            reader = READERS[phid_type]
            # A UNION names its columns after its first SELECT: every branch names them the same.
            expressions = ", ".join(f"{reader.columns.get(name, 'NULL')} AS `{name}`" for name in all_names)
            where, found = in_filter("o.phid", phids, f"phid{number}_")
            selects.append(f"SELECT o.phid AS phid, {expressions} FROM {self._from(phid_type)} WHERE {where}")
            params.update(found)
        rows = self._select(app, " UNION ALL ".join(selects), params, "are shown by their PHID")
        if rows is None:
            return None
        read: dict[str, ObjectName | None] = {phid: None for phids in batch.values() for phid in phids}
        for row in rows:
            phid = text(row["phid"])
            if phid in read:
                read[phid] = READERS[phid_get_type(phid)].name({name: row[name] for name in all_names})
        return read

    def _from(self, phid_type: str) -> str:
        tables = OBJECT_TABLES[phid_type]
        database = qualified(self.namespace, tables.object_app, tables.object_table).split(".")[0]
        joins = READERS[phid_type].joins.format(db=database)
        return f"{qualified(self.namespace, tables.object_app, tables.object_table)} o {joins}".rstrip()

    def _select(self, app: str, sql: str, params: Mapping[str, object], lost: str) -> list[Record] | None:
        """The rows of one statement on `app`'s master; None (and said once) when it cannot be read."""
        if self._unreadable.get(app, 0.0) > self._clock():
            return None
        route = self.masters.route(app)
        if route.source is None:
            if self._logged.first(f"elsewhere {app}"):
                logger.warning(
                    f"Phorge's {app} application is on another master ({route.master}) than herald's, which this "
                    f"service cannot reach: its objects {lost}",
                    extra={"event": "names.app_elsewhere", "application": app, "master": route.master},
                )
            return None
        try:
            return select(route.source, sql, params)
        except NoAccessError as exc:
            self._unreadable[app] = self._clock() + UNREADABLE_RECHECK_SEC
            if exc.code is None:
                if self._logged.first("no mysql"):
                    logger.info(
                        f"Phorge's application databases are not on this database server: objects {lost}",
                        extra={"event": "names.databases_elsewhere"},
                    )
            elif self._logged.first(f"app {app}"):
                tables = ", ".join(
                    qualified(self.namespace, t.object_app, t.object_table)
                    for t in OBJECT_TABLES.values()
                    if t.object_app == app
                )
                logger.warning(
                    f"cannot read {tables} (no SELECT grant, or no such table): those objects {lost}",
                    extra={"event": "names.table_unreadable", "application": app, "mysql_error": exc.code},
                )
            return None
        except MasterUnavailable:
            return None  # Masters said so, and tries again after a while
        except DatabaseError as exc:
            self._unreadable[app] = self._clock() + FAILED_RECHECK_SEC
            logger.warning(
                f"Phorge's {app} database did not answer a name lookup: its objects {lost} for a while",
                extra={"event": "names.lookup_failed", "application": app, "error": type(exc).__name__},
            )
            return None

    # -- monogram -> PHIDs ---------------------------------------------------------------------------

    def find(self, term: str) -> list[str]:
        """The PHIDs of the objects that the monograms in `term` name (`T123`, `D45 P12`, `rXYZabc12`,
        `R4:abc12`, `@alice`, ...), as Phorge resolves them: a commit prefix that matches several commits
        names none. Nothing for what names no object, or what cannot be read."""
        found: list[str] = []
        for word in term.split()[:SEARCH_TERMS]:
            for reference in names.references(word):
                found += self._find(reference)
        return list(dict.fromkeys(found))

    def _find(self, reference: Reference) -> list[str]:
        lost = "cannot be found by monogram"
        if isinstance(reference, ById):
            sql = f"SELECT o.phid FROM {self._from(reference.phid_type)} WHERE o.id = %(id)s"
            return self._phids(OBJECT_TABLES[reference.phid_type].object_app, sql, {"id": reference.id}, lost)
        if isinstance(reference, RepositoryRef):
            where, params = _repository_filter(reference, "o")
            return self._phids("repository", f"SELECT o.phid FROM {self._from('REPO')} WHERE {where}", params, lost)
        if isinstance(reference, UserRef):
            sql = f"SELECT o.phid FROM {self._from('USER')} WHERE o.userName = %(username)s"
            return self._phids("user", sql, {"username": reference.username}, lost)
        return self._find_commit(reference, lost)

    def _find_commit(self, reference: CommitRef, lost: str) -> list[str]:
        identifier = reference.identifier
        prefix = identifier + "%"  # hex digits or decimal digits only: no LIKE wildcard in it
        params: dict[str, object] = {"prefix": prefix, "svn": names.SVN, "identifier": identifier}
        where = "o.commitIdentifier LIKE %(prefix)s AND LENGTH(o.commitIdentifier) = 40"
        if reference.repository is not None:
            where, repository = _repository_filter(reference.repository, "r")
            params.update(repository)
            # A Subversion revision is matched whole, a git or Mercurial hash by a prefix of at least 5.
            kinds: list[str] = []
            if identifier.isdigit():
                kinds.append("(r.versionControlSystem = %(svn)s AND o.commitIdentifier = %(identifier)s)")
            if len(identifier) >= names.MINIMUM_QUALIFIED_HASH:
                kinds.append("(r.versionControlSystem <> %(svn)s AND o.commitIdentifier LIKE %(prefix)s)")
            if not kinds:
                return []
            where = f"{where} AND ({' OR '.join(kinds)})"
        found = self._phids(
            "repository", f"SELECT o.phid FROM {self._from('CMIT')} WHERE {where} LIMIT 2", params, lost
        )
        return found if len(found) == 1 else []

    def _phids(self, app: str, sql: str, params: Mapping[str, object], lost: str) -> list[str]:
        rows = self._select(app, sql, params, lost)
        return [] if rows is None else [text(row["phid"]) for row in rows]


def _repository_filter(reference: RepositoryRef, alias: str) -> tuple[str, dict[str, object]]:
    if reference.id is not None:
        return f"{alias}.id = %(repository_id)s", {"repository_id": reference.id}
    return f"{alias}.callsign = %(callsign)s", {"callsign": reference.callsign}
