"""Whether Phorge hands delivery to this service, as contrib/phorge's predicate decides it (gorge.webhook.uri
set and phabricator.silent off), read where the service reads Phorge's other settings: the local file, then
the config table, then Phorge's default. The soulteary/phorge fork's gorge.webhook.owner decides where set.

Here: the reading alone; the pages, /readyz, check and the worker's warning are in tests/db/test_delegation.py,
the PHP side in tests/process/test_phorge_patch.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.support.service_uris import SERVICE_URIS, VALID
from tests.support.service_uris import UNSET as UNSET_URI
from webhook_delivery.phorge.config import LocalRead, PhorgeConfig, resolve
from webhook_delivery.phorge.delegation import FORK_OWNER, SERVICE_URI, service_uri_problem
from webhook_delivery.phorge.formats import load_config

UNSET = load_config({}).delivery  # no GORGE_WEBHOOK_SILENT, no local file
FILE = "/srv/phorge/conf/local/local.json"
TABLE = "`ns_config`.`config_entry`"
URI = "http://gorge-webhook:8160/"


def read(local: LocalRead | None, database: dict[str, Any] | None, silent: bool | None = None) -> PhorgeConfig:
    return resolve(dataclasses.replace(UNSET, silent=silent), local, database, TABLE)


def row(resolved: PhorgeConfig, option: str) -> tuple[str, str, str]:
    [(shown, where)] = [(shown, where.describe()) for name, shown, where in resolved.summary() if name == option]
    return option, shown, where


def test_the_uri_in_the_local_file_or_the_config_table_delegates_and_the_file_wins() -> None:
    by_file = read(LocalRead(FILE, {"phabricator.silent": False, SERVICE_URI: URI}), None)
    assert by_file.delegation.line == (
        f"PHP delivery: delegated (gorge.webhook.uri is set (local file {FILE}) and phabricator.silent is off: "
        "Phorge schedules no HeraldWebhookWorker task, this service delivers every request)"
    )
    assert row(by_file, SERVICE_URI) == (SERVICE_URI, "set", f"local file ({FILE})")

    by_table = read(None, {SERVICE_URI: URI}, silent=False)
    assert by_table.delegation.state == "delegated"
    assert row(by_table, SERVICE_URI) == (SERVICE_URI, "set", f"database ({TABLE})")
    assert f"gorge.webhook.uri is set (database {TABLE}) and phabricator.silent is off" in by_table.delegation.why

    emptied = read(LocalRead(FILE, {SERVICE_URI: ""}), {SERVICE_URI: URI})  # bin/config set gorge.webhook.uri ''
    assert emptied.delegation.state == "not delegated"
    assert row(emptied, SERVICE_URI) == (SERVICE_URI, "not set", f"local file ({FILE})")


def test_not_set_is_not_delegated_and_what_cannot_be_read_is_unknown() -> None:
    absent = read(LocalRead(FILE, {}), None)
    assert absent.delegation.line == (
        "PHP delivery: not delegated (gorge.webhook.uri is not set (Phorge's default): Phorge's PHP worker gets "
        "a task for every request and the requests with a task are left to it)"
    )
    # No file: bin/config set writes the option to local.json, so a table without it tells nothing.
    assert read(None, {}, silent=False).delegation.state == "unknown"
    nothing = read(None, None, silent=False).delegation
    assert nothing.state == "unknown" and "no local file given (GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG)" in nothing.why
    broken = read(LocalRead(FILE, None, "not valid JSON"), {SERVICE_URI: URI}).delegation
    assert (
        broken.line == f"PHP delivery: unknown (gorge.webhook.uri cannot be told: cannot read {FILE}: not valid JSON)"
    )


def test_silent_mode_comes_first_as_in_the_predicate() -> None:
    silenced = read(LocalRead(FILE, {"phabricator.silent": True, SERVICE_URI: URI}), None).delegation
    assert silenced.state == "not delegated"
    assert f"but phabricator.silent is on (local file {FILE}): Phorge's PHP worker fails every request" in silenced.why
    overridden = read(LocalRead(FILE, {SERVICE_URI: URI}), None, silent=True).delegation
    assert "phabricator.silent is on (variable GORGE_WEBHOOK_SILENT)" in overridden.why
    undeclared = read(None, {SERVICE_URI: URI}).delegation  # silent mode itself unknown
    assert undeclared.state == "unknown" and undeclared.why.endswith("but phabricator.silent is unknown")


@pytest.mark.parametrize(("value", "verdict"), SERVICE_URIS, ids=[repr(value) for value, _verdict in SERVICE_URIS])
def test_each_value_reads_as_the_patchs_predicate_reads_it(value: Any, verdict: str) -> None:
    """The table the patch's PHP is run over too (tests/process/test_phorge_patch.py): a base URI delegates,
    an unset value does not, and an invalid one does not either, its problem named where it is shown."""
    resolved = read(LocalRead(FILE, {SERVICE_URI: value}), None)
    assert service_uri_problem(value) == (None if verdict in (UNSET_URI, VALID) else verdict)
    if verdict == VALID:
        assert (resolved.delegation.state, row(resolved, SERVICE_URI)[1]) == ("delegated", "set")
    elif verdict == UNSET_URI:
        assert (resolved.delegation.state, row(resolved, SERVICE_URI)[1]) == ("not delegated", "not set")
    else:
        assert (resolved.delegation.state, row(resolved, SERVICE_URI)[1]) == ("not delegated", f"invalid: {verdict}")
        assert resolved.delegation.why.startswith(
            f"gorge.webhook.uri is invalid: {verdict}, which Phorge's web and its daemons read as not set (local "
            f"file {FILE}): Phorge's PHP worker gets a task for every request"
        )


def test_the_uri_itself_is_never_shown() -> None:
    for value in (
        "https://gorge.internal:8443/",
        "https://ops:s3cret@gorge.internal/",
        "http://gorge.internal/?t=s3cret",
    ):
        resolved = read(LocalRead(FILE, {SERVICE_URI: value}), None)
        shown = repr(resolved.summary()) + resolved.delegation.line
        assert "s3cret" not in shown and "gorge.internal" not in shown


def test_the_forks_owner_option_decides_where_it_is_set() -> None:
    owned = read(LocalRead(FILE, {FORK_OWNER: "gorge"}), None)
    assert owned.delegation.state == "delegated"
    assert owned.delegation.why.startswith(f"gorge.webhook.owner = 'gorge' (local file {FILE}) and")
    assert row(owned, FORK_OWNER) == (FORK_OWNER, "'gorge'", f"local file ({FILE})")
    # The fork keeps gorge.webhook.uri for its diagnostics client: the owner still says PHP delivers.
    kept = read(LocalRead(FILE, {FORK_OWNER: "phorge", SERVICE_URI: URI}), None)
    assert kept.delegation.state == "not delegated"
    assert kept.delegation.why.startswith("gorge.webhook.owner is not 'gorge'")
    assert [name for name, _shown, _where in kept.summary()][-1] == FORK_OWNER


def test_the_forks_owner_reads_as_the_fork_reads_it() -> None:
    """PhabricatorGorgeServiceSpec::getOwner(): `auto` (or unset) leaves it to the URI, anything but
    `gorge`, `phorge` and `auto`, compared exactly, makes Phorge fail: unknown here, never delivered on."""
    auto = read(LocalRead(FILE, {FORK_OWNER: "auto", SERVICE_URI: URI}), None)
    assert auto.delegation.state == "delegated" and row(auto, SERVICE_URI)[1] == "set"
    unset_uri = read(LocalRead(FILE, {FORK_OWNER: "auto"}), None)
    assert unset_uri.delegation.state == "not delegated"
    for refused in ("Gorge", " gorge", "yes", 1):
        odd = read(LocalRead(FILE, {FORK_OWNER: refused, SERVICE_URI: URI}), None)
        assert odd.delegation.state == "unknown", refused
        assert odd.delegation.why.startswith("gorge.webhook.owner is neither 'gorge', 'phorge' nor 'auto'")
