"""Phorge's names of objects (issue 28, item 7), database-free: the formatter against Phorge's own handles and
the monograms it reads back, and the readers against Phorge's DDL."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tests.support.phorge_app_db import app_schema
from webhook_delivery.phorge import names
from webhook_delivery.phorge.names import ById, CommitRef, ObjectName, Repository, RepositoryRef, UserRef
from webhook_delivery.phorge.object_names import READERS
from webhook_delivery.phorge.objects import OBJECT_TABLES
from webhook_delivery.sql import PHORGE_SCHEMA

HASH = "a9caf12b3c4d5e6f708192a3b4c5d6e7f8091a2b"
ids = st.integers(min_value=1, max_value=names.ID_MAX)
titles = st.text(max_size=80)
hashes = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)
callsigns = st.none() | st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=8)


def test_monogram_types_are_named_as_their_phid_types_do() -> None:
    assert names.task(123, "Fix the login") == ObjectName("T123", "T123: Fix the login", "/T123")
    assert names.revision(45, "Add a test") == ObjectName("D45", "D45: Add a test", "/D45")
    assert names.paste(12, "notes") == ObjectName("P12", "P12 notes", "/P12")
    assert names.paste(12, "") == names.paste(12, "0") == ObjectName("P12", "P12 (An Untitled Masterwork)", "/P12")
    assert names.mock(3, "logo") == ObjectName("M3", "M3: logo", "/M3")
    assert names.file(7, "a.png") == ObjectName("F7", "F7: a.png", "/F7")
    assert names.countdown(2, "launch") == ObjectName("C2", "C2: launch", "/C2")
    assert names.poll(9, "Lunch?") == ObjectName("V9", "V9: Lunch?", "/V9")
    assert names.legalpad(4, "CLA") == ObjectName("L4 CLA", "L4 CLA", "/L4")
    assert names.conpherence(5, "") == ObjectName("Private Room", "Z5: Private Room", "/Z5")


def test_named_types_are_named_as_their_phid_types_do() -> None:
    assert names.user("alice", "Alice Liddell") == ObjectName("alice", "alice (Alice Liddell)", "/p/alice/")
    assert names.user("bob", "") == ObjectName("bob", "bob", "/p/bob/")
    assert names.project(8, "Web", "web") == ObjectName("Web", "Web", "/tag/web/")
    assert names.project(9, "Sprint 3", None, milestone_of="Web") == ObjectName(
        "Web (Sprint 3)", "Web (Sprint 3)", "/project/view/9/"
    )
    assert names.badge(1, "Helper").path == "/badges/view/1/"
    assert names.dashboard(6, "Ops").path == "/dashboard/view/6/"
    assert names.webhook(2, "rule") == ObjectName("rule", "Webhook 2 rule", "/herald/webhook/view/2/")
    assert names.phriction("/") == ObjectName("/", "/", "/w/")
    assert names.phriction("projects/déjà vu/").path == "/w/projects/d%C3%A9j%C3%A0%20vu/"


def test_repositories_and_commits_as_phorge_formats_them() -> None:
    xyz = Repository(4, "XYZ", names.GIT, "Web site", None)
    bare = Repository(5, None, names.GIT, "Tools", "tools")
    svn = Repository(6, "SV", names.SVN)
    assert names.repository(xyz) == ObjectName("rXYZ", "rXYZ Web site", "/diffusion/XYZ/")
    assert names.repository(bare) == ObjectName("R5", "R5 Tools", "/source/tools/")
    assert names.repository(Repository(7, None, names.GIT)).path == "/diffusion/7/"
    assert names.commit(xyz, HASH, "Fix it") == ObjectName(
        "rXYZa9caf12b3c4d", "rXYZa9caf12b3c4d: Fix it", f"/rXYZ{HASH}"
    )
    assert names.commit(bare, HASH, "") == ObjectName("R5:a9caf12b3c4d", "R5:a9caf12b3c4d", f"/R5:{HASH}")
    assert names.commit(svn, "1234", "r") == ObjectName("rSV1234", "rSV1234: r", "/rSV1234")
    assert names.commit(Repository(8, "HG", names.MERCURIAL), HASH, "").name == "rHGa9caf12b3c4d"


def test_the_rest_of_a_full_name_follows_the_name() -> None:
    assert names.task(1, "x").rest == ": x"
    assert names.badge(1, "x").rest == ""
    assert names.webhook(2, "rule").rest == " Webhook 2 rule"


def test_monograms_are_read_back_as_phorge_reads_them() -> None:
    assert names.references("T123") == names.references("t0123") == [ById("TASK", 123)]
    assert names.references("D45") == [ById("DREV", 45)]
    assert names.references("P12") == [ById("PSTE", 12)] and names.references("M3") == [ById("MOCK", 3)]
    assert names.references("F7") == [ById("FILE", 7)] and names.references("f7") == []  # F is case-sensitive
    assert names.references("rXYZ") == [RepositoryRef("XYZ", None)]
    assert names.references("R4") == [RepositoryRef(None, 4)]
    assert names.references("rXYZabc12") == [CommitRef(RepositoryRef("XYZ", None), "abc12")]
    assert names.references("rXYZ:abc12") == [CommitRef(RepositoryRef("XYZ", None), "abc12")]
    assert names.references("R4:abc12") == [CommitRef(RepositoryRef(None, 4), "abc12")]
    assert names.references("rSV1234") == [CommitRef(RepositoryRef("SV", None), "1234")]
    assert names.references("abcdef1") == [CommitRef(None, "abcdef1")]
    assert names.references("c1234567") == [ById("CDWN", 1234567), CommitRef(None, "c1234567")]
    assert names.references("@alice") == [UserRef("alice")]
    for nothing in [
        "",
        "T",
        "T0",
        "D0",
        "D012",
        "rXYZab",
        "R4:ab",
        "abcdef",
        "T99999999999",
        "T\u0661\u0662",
        "PHID-TASK-x",
    ]:
        assert names.references(nothing) == [], nothing


@given(ids, titles)
def test_a_task_name_is_its_monogram_and_its_title(object_id: int, title: str) -> None:
    name = names.task(object_id, title)
    assert name.full_name == f"T{object_id}: {title}" and name.path == f"/{name.name}"
    assert name.name + name.rest == name.full_name
    assert names.references(name.name) == [ById("TASK", object_id)]


@given(ids, callsigns, hashes)
def test_a_commit_name_reads_back_as_its_commit(repo_id: int, callsign: str | None, identifier: str) -> None:
    repo = Repository(repo_id, callsign, names.GIT)
    name = names.commit(repo, identifier, "")
    scope = f"r{callsign}" if callsign else f"R{repo_id}:"
    assert name.name == scope + identifier[:12]
    assert name.path == f"/{scope}{identifier}"
    scoped = RepositoryRef(callsign, None) if callsign else RepositoryRef(None, repo_id)
    assert CommitRef(scoped, identifier[:12]) in names.references(name.name)
    assert CommitRef(scoped, identifier) in names.references(name.path[1:])


@given(st.text(max_size=60))
def test_any_text_reads_as_references_without_failing(text: str) -> None:
    for reference in names.references(text):
        if isinstance(reference, ById):
            assert 1 <= reference.id <= names.ID_MAX and reference.phid_type in READERS


@given(st.text(max_size=40))
def test_a_phriction_path_is_one_uri_whatever_the_slug(slug: str) -> None:
    path = names.phriction(slug).path
    assert path.startswith("/w/") and re.fullmatch(r"[A-Za-z0-9_.~/%-]*", path)


def test_every_object_table_type_is_named_from_columns_of_phorges_ddl() -> None:
    assert READERS.keys() == OBJECT_TABLES.keys()
    ddl = app_schema()
    herald = dict(re.findall(r"CREATE TABLE `(\w+)` (.*?);", PHORGE_SCHEMA.read_text(), re.DOTALL))

    def columns(app: str, table: str) -> set[str]:
        text = herald[table] if app == "herald" else ddl[(app, table)]
        return set(re.findall(r"^\s+`(\w+)` ", text, re.MULTILINE))

    for phid_type, reader in READERS.items():
        tables = OBJECT_TABLES[phid_type]
        aliases = {"o": tables.object_table, "r": "repository", "p": "project"}
        for expression in reader.columns.values():
            for alias, column in re.findall(r"\b([orp])\.(\w+)", expression):
                assert column in columns(tables.object_app, aliases[alias]), (phid_type, expression)
