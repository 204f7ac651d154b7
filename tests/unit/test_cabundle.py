"""The CA bundle PHP uses, found as arcanist's HTTPSFuture finds it, and found again when its files change
(webhook_delivery/phorge/cabundle.py). The deliveries it verifies are in tests/unit/test_transport.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.arcanist import MOZILLA_ROOTS, arcanist_tree, bundle_in_force
from webhook_delivery.config import Trust
from webhook_delivery.phorge.cabundle import CaBundleFile, arcanist_beside, choose, trust_from
from webhook_delivery.phorge.filestamp import RECHECK_SEC
from webhook_delivery.phorge.formats import load_config


def test_arcanist_is_looked_for_beside_phorge_as_its_install_docs_lay_it_out(tmp_path: Path) -> None:
    assert arcanist_beside("/srv/phorge/phorge/conf/local/local.json") == "/srv/phorge/arcanist"
    assert arcanist_beside("/etc/phorge/local.json") == ""
    tree = arcanist_tree(tmp_path, custom=MOZILLA_ROOTS)
    local = tmp_path / "phorge" / "conf" / "local" / "local.json"
    found = trust_from("", "", str(local), "")
    assert (found.arcanist, found.arcanist_from) == (str(tree), "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG")
    missing = trust_from("", "", "/nowhere/phorge/conf/local/local.json", "")
    assert missing.arcanist == "" and "no /nowhere/arcanist beside Phorge's" in missing.arcanist_from


@pytest.mark.parametrize(
    ("custom", "cainfo", "default", "chosen", "origin"),
    [
        (True, True, True, "custom.pem", "arcanist"),  # custom.pem first: it overrides everything
        (False, True, True, "/etc/php-ca.pem", "variable"),  # then PHP's curl.cainfo
        (False, False, True, "default.pem", "arcanist"),  # then the bundle arcanist ships
        (False, False, False, None, "arcanist"),  # a packaging without default.pem: libcurl's own store
        (True, False, False, "custom.pem", "arcanist"),
    ],
)
def test_httpsfutures_order(custom: bool, cainfo: bool, default: bool, chosen: str | None, origin: str) -> None:
    ssl_dir = "/srv/arcanist/resources/ssl"
    present = {f"{ssl_dir}/custom.pem": custom, f"{ssl_dir}/default.pem": default}
    trust = Trust("", "/srv/arcanist", "GORGE_WEBHOOK_ARCANIST_ROOT", "/etc/php-ca.pem" if cainfo else "")
    bundle = choose(trust, exists=lambda path: present[path])
    expected = chosen if chosen is None or chosen.startswith("/") else f"{ssl_dir}/{chosen}"
    assert (bundle.path, bundle.origin) == (expected, origin)
    assert bundle.shown == (expected or "the system store")


def test_the_variable_overrides_and_system_means_the_system_store() -> None:
    trust = Trust("/etc/gorge/ca.pem", "/srv/arcanist", "GORGE_WEBHOOK_ARCANIST_ROOT", "/etc/php-ca.pem")
    assert choose(trust, exists=lambda path: True).path == "/etc/gorge/ca.pem"
    system = choose(Trust("system", "/srv/arcanist", "GORGE_WEBHOOK_ARCANIST_ROOT"), exists=lambda path: True)
    assert (system.path, system.origin, system.where) == (None, "variable", "GORGE_WEBHOOK_CA_BUNDLE")


def test_without_arcanist_the_system_store_is_used_and_said_to_differ_from_php() -> None:
    bundle = choose(trust_from("", "", "", ""))
    assert (bundle.path, bundle.origin) == (None, "unknown")
    assert "set GORGE_WEBHOOK_ARCANIST_ROOT or GORGE_WEBHOOK_CA_BUNDLE" in bundle.where
    assert choose(trust_from("", "", "", "/etc/php-ca.pem")).path == "/etc/php-ca.pem"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_bundle_is_found_again_when_a_file_appears_changes_or_goes(tmp_path: Path) -> None:
    tree = arcanist_tree(tmp_path)
    custom = tree / "resources" / "ssl" / "custom.pem"
    clock = Clock()
    watched = CaBundleFile(load_config({"GORGE_WEBHOOK_ARCANIST_ROOT": str(tree)}).delivery.trust, clock=clock)
    first = watched.current()
    assert first.path == str(tree / "resources" / "ssl" / "default.pem")
    assert watched.current() is first, "the same object while nothing changed"
    custom.write_bytes(MOZILLA_ROOTS.read_bytes())
    assert watched.current() is first, "looked at once a second at most"
    clock.now += RECHECK_SEC
    placed = watched.current()
    assert placed.path == str(custom)
    custom.write_bytes(MOZILLA_ROOTS.read_bytes()[:-1] + b"\n\n")  # rewritten in place: same path, new stamp
    os.utime(custom, ns=(1, 1))
    clock.now += RECHECK_SEC
    rewritten = watched.current()
    assert rewritten.path == placed.path and rewritten != placed
    custom.unlink()
    clock.now += RECHECK_SEC
    assert watched.current().path == first.path


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"GORGE_WEBHOOK_CA_BUNDLE": "/nonexistent/ca.pem"}, "GORGE_WEBHOOK_CA_BUNDLE"),
        ({"GORGE_WEBHOOK_CA_BUNDLE": "/etc/hostname"}, "GORGE_WEBHOOK_CA_BUNDLE"),
        (
            {"GORGE_WEBHOOK_ARCANIST_ROOT": "{tree}", "GORGE_WEBHOOK_PHP_CURL_CAINFO": "/nope"},
            "GORGE_WEBHOOK_PHP_CURL_CAINFO",
        ),
        ({"GORGE_WEBHOOK_ARCANIST_ROOT": "{tree}", "custom.pem": "not a certificate"}, "GORGE_WEBHOOK_ARCANIST_ROOT"),
        (
            {"GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG": "{local}", "custom.pem": "not a certificate"},
            "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG",
        ),
        ({"GORGE_WEBHOOK_ARCANIST_ROOT": "/nonexistent/arcanist"}, "GORGE_WEBHOOK_ARCANIST_ROOT"),
    ],
)
def test_a_bundle_that_cannot_be_used_stops_start_up_naming_the_variable_that_leads_to_it(
    env: dict[str, str], variable: str, tmp_path: Path
) -> None:
    tree = arcanist_tree(tmp_path, default=False)
    local = tmp_path / "phorge" / "conf" / "local" / "local.json"
    local.parent.mkdir(parents=True)
    local.write_text("{}")
    if "custom.pem" in env:
        (tree / "resources" / "ssl" / "custom.pem").write_text(env.pop("custom.pem"))
    loaded = load_config({name: value.format(tree=tree, local=local) for name, value in env.items()})
    assert [error.variable for error in loaded.errors] == [variable]


def test_a_readable_bundle_starts() -> None:
    assert bundle_in_force(GORGE_WEBHOOK_CA_BUNDLE=str(MOZILLA_ROOTS)).path == str(MOZILLA_ROOTS)
    assert bundle_in_force(GORGE_WEBHOOK_CA_BUNDLE="system").path is None
