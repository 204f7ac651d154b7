"""contrib/phorge/gorge-webhook.patch, the Phorge side of the handover, checked without Phorge (CI cannot
fetch it; the session that writes the patch applies it to Phorge and runs it with phd, see contrib/phorge/README.md):
the PHP files it adds pass `php -l`, its edits to Phorge's two files are the two guards and nothing else, and its
predicate, run by PHP with Phorge's configuration reader stood in, decides as the service reads the same settings.

`php` is Debian's php-cli, which only `make test` installs: elsewhere these tests are skipped, in `make test` and
CI a missing php fails them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT
from webhook_delivery.config import load_config
from webhook_delivery.phorge.config import LocalRead, resolve

PATCH = ROOT / "contrib" / "phorge" / "gorge-webhook.patch"
PREDICATE = "src/extensions/gorge-webhook/HeraldGorgeWebhookDelivery.php"
GUARDED = {
    "src/applications/herald/storage/HeraldWebhookRequest.php": "      return $this;",
    "src/applications/herald/worker/HeraldWebhookWorker.php": "      return;",
}
# Phorge's configuration reader and libphutil's string test, as far as the predicate uses them: Phorge has
# validated each value by then (a bool for phabricator.silent; a string or null for gorge.webhook.uri).
STAND_IN = """<?php
class Phobject {}
final class PhabricatorEnv {
  public static $config = array();
  public static function getEnvConfig($key) {
    return self::$config[$key];
  }
}
function phutil_nonempty_string($value) {
  return ($value !== null && $value !== '');
}
require $argv[1];
$decided = array();
foreach (json_decode($argv[2], true) as $config) {
  PhabricatorEnv::$config = $config;
  $decided[] = HeraldGorgeWebhookDelivery::isDelegated();
}
echo json_encode($decided);
"""


def files(patch: str) -> dict[str, tuple[bool, list[str], list[str]]]:
    """path -> (added as a new file, the lines it adds, the lines it removes), from a `git diff`."""
    found: dict[str, tuple[bool, list[str], list[str]]] = {}
    path = ""
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            path = line.split(" b/", 1)[1]
            found[path] = (False, [], [])
        elif line.startswith("new file mode"):
            found[path] = (True, [], [])
        elif line.startswith("+") and not line.startswith("+++"):
            found[path][1].append(line[1:])
        elif line.startswith("-") and not line.startswith("---"):
            found[path][2].append(line[1:])
    return found


def added(tmp_path: Path) -> dict[str, Path]:
    """The files the patch adds, written out whole under tmp_path."""
    written = {}
    for path, (new, lines, _removed) in files(PATCH.read_text()).items():
        if new:
            target = tmp_path / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(lines) + "\n")
            written[path] = target
    return written


def test_the_edits_to_phorge_are_the_two_guards_and_the_options_keep_the_seeds_names() -> None:
    found = files(PATCH.read_text())
    edited = {path: lines for path, (new, lines, removed) in found.items() if not new}
    assert sorted(edited) == sorted(GUARDED)
    for path, returned in GUARDED.items():
        _new, lines, removed = found[path]
        assert removed == [], f"{path}: the patch only adds lines"
        code = [line.strip() for line in lines if line.strip() and not line.strip().startswith("//")]
        assert code == ["if (HeraldGorgeWebhookDelivery::isDelegated()) {", returned.strip(), "}"], path
    assert all(path.startswith("src/extensions/gorge-webhook/") for path, (new, _, _) in found.items() if new)
    options = "\n".join(found["src/extensions/gorge-webhook/HeraldGorgeWebhookConfigOptions.php"][1])
    assert "newOption('gorge.webhook.uri', 'string', null)" in options
    assert "newOption('gorge.webhook.token', 'string', null)" in options
    check = "\n".join(found["src/extensions/gorge-webhook/HeraldGorgeWebhookSetupCheck.php"][1])
    assert all(part in check for part in ("'/readyz'", "'/api/webhook/stats'", "'X-Service-Token'", "'php_delivery'"))


@pytest.mark.needs_tool("php")
def test_every_php_file_the_patch_adds_passes_php_lint(tmp_path: Path) -> None:
    written = added(tmp_path)
    assert len(written) == 3
    for path, target in written.items():
        done = subprocess.run(["php", "-l", str(target)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "No syntax errors detected" in done.stdout, path + done.stdout + done.stderr


@pytest.mark.needs_tool("php")
def test_the_predicate_run_by_php_decides_as_the_service_reads_the_settings(tmp_path: Path) -> None:
    uris = [None, "", "http://gorge-webhook:8160/", "https://gorge.example.com/"]
    cases = [{"phabricator.silent": silent, "gorge.webhook.uri": uri} for uri in uris for silent in (False, True)]
    harness = tmp_path / "harness.php"
    harness.write_text(STAND_IN)
    done = subprocess.run(
        ["php", str(harness), str(added(tmp_path)[PREDICATE]), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    php = json.loads(done.stdout)
    assert php == [case["gorge.webhook.uri"] not in (None, "") and not case["phabricator.silent"] for case in cases]
    unset = load_config({}).delivery
    service = [
        resolve(unset, LocalRead("local.json", dict(case)), None, "table").delegation.state == "delegated"
        for case in cases
    ]
    assert service == php


KEY_PATCH = ROOT / "contrib" / "phorge" / "gorge-webhook-key-status.patch"


def test_the_optional_key_patch_adds_the_autopatch_and_declares_the_key_it_makes() -> None:
    """The autopatch makes key_status (status, id), the name and columns the service looks for, and the same
    key is declared in CONFIG_KEY_SCHEMA (else bin/storage adjust drops it); nothing of Phorge's is removed.
    That bin/storage upgrade makes it and adjust keeps it was checked on a fetched Phorge (the README)."""
    from webhook_delivery.reads.tally_sql import KEY_STATUS

    found = files(KEY_PATCH.read_text())
    autopatch = "resources/sql/autopatches/20260907.herald.01.requeststatuskey.sql"
    assert set(found) == {autopatch, "src/applications/herald/storage/HeraldWebhookRequest.php"}
    new, sql, removed = found[autopatch]
    assert new and not removed
    assert " ".join(" ".join(sql).split()) == (
        f"ALTER TABLE {{$NAMESPACE}}_herald.herald_webhookrequest ADD KEY `{KEY_STATUS}` (`status`, `id`);"
    )
    new, declared, removed = found["src/applications/herald/storage/HeraldWebhookRequest.php"]
    assert not new and not removed
    code = [line.strip() for line in declared if not line.strip().startswith("//")]
    assert code == [f"'{KEY_STATUS}' => array(", "'columns' => array('status', 'id'),", "),"]
