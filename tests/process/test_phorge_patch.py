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
from typing import Any

import pytest

from tests.support import ROOT
from tests.support.service_uris import SERVICE_URIS, UNSET, VALID
from webhook_delivery.phorge.config import LocalRead, resolve
from webhook_delivery.phorge.delegation import SERVICE_URI, service_uri_problem
from webhook_delivery.phorge.formats import load_config

SERVICE_URIS_VERDICT = {json.dumps(value): verdict for value, verdict in SERVICE_URIS}

PATCH = ROOT / "contrib" / "phorge" / "gorge-webhook.patch"
PREDICATE = "src/extensions/gorge-webhook/HeraldGorgeWebhookDelivery.php"
GUARDED = {
    "src/applications/herald/storage/HeraldWebhookRequest.php": "      return $this;",
    "src/applications/herald/worker/HeraldWebhookWorker.php": "      return;",
}
# Phorge's configuration reader and pht(), as far as the patch's predicate uses them: the values as stored
# (getUnrepairedEnvConfig), which may be anything a hand-written local.json holds. Each call is [method, args]
# or, for isDelegated, [config]; its answer, or the exception it threw, comes back in order.
STAND_IN = """<?php
class Phobject {}
final class PhabricatorEnv {
  public static $config = array();
  public static function getUnrepairedEnvConfig($key, $default = null) {
    return array_key_exists($key, self::$config) ? self::$config[$key] : $default;
  }
  public static function getEnvConfig($key) {
    throw new Exception('the predicate reads the values as stored');
  }
}
function pht($format, ...$args) {
  return vsprintf($format, $args);
}
require $argv[1];
$answers = array();
foreach (json_decode(file_get_contents($argv[2]), true) as $call) {
  try {
    if ($call[0] === 'isDelegated') {
      PhabricatorEnv::$config = $call[1];
      $answers[] = HeraldGorgeWebhookDelivery::isDelegated();
    } else {
      $answers[] = call_user_func_array(
        array('HeraldGorgeWebhookDelivery', $call[0]), $call[1]);
    }
  } catch (Throwable $ex) {
    $answers[] = array('threw' => get_class($ex));
  }
}
echo json_encode($answers);
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
    assert all(f"'gorge.webhook.{key}'" in check for key in ("invalid", "cleartext", "redirect"))


@pytest.mark.needs_tool("php")
def test_every_php_file_the_patch_adds_passes_php_lint(tmp_path: Path) -> None:
    written = added(tmp_path)
    assert len(written) == 3
    for path, target in written.items():
        done = subprocess.run(["php", "-l", str(target)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "No syntax errors detected" in done.stdout, path + done.stdout + done.stderr


def run_predicate(tmp_path: Path, calls: list[tuple[str, Any]]) -> list[Any]:
    """The patch's HeraldGorgeWebhookDelivery, run by PHP over `calls`: what each returned."""
    harness, values = tmp_path / "harness.php", tmp_path / "calls.json"
    harness.write_text(STAND_IN)
    values.write_text(json.dumps(calls))
    done = subprocess.run(
        ["php", str(harness), str(added(tmp_path)[PREDICATE]), str(values)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answers: list[Any] = json.loads(done.stdout)
    assert len(answers) == len(calls)
    return answers


@pytest.mark.needs_tool("php")
def test_the_php_predicate_names_the_same_problem_as_the_service_for_every_value(tmp_path: Path) -> None:
    """The shared table: each value's problem (None for an unset value or a base URI) in the PHP's words and
    the service's, and never an exception."""
    problems = run_predicate(tmp_path, [("getURIProblem", [value]) for value, _expected in SERVICE_URIS])
    expected = [None if verdict in (UNSET, VALID) else verdict for _value, verdict in SERVICE_URIS]
    assert problems == expected
    assert [service_uri_problem(value) for value, _verdict in SERVICE_URIS] == expected


@pytest.mark.needs_tool("php")
def test_the_predicate_run_by_php_decides_as_the_service_reads_the_settings(tmp_path: Path) -> None:
    """isDelegated() over every value of the table, silenced or not, read as stored: PHP's answer (never an
    exception, whatever the value) is the service's."""
    cases = [
        {"phabricator.silent": silent, SERVICE_URI: value}
        for value, _verdict in SERVICE_URIS
        for silent in (False, True)
    ]
    cases.append({"phabricator.silent": "yes", SERVICE_URI: "http://gorge-webhook:8160/"})  # PHP's truthiness
    cases.append({"phabricator.silent": False})  # the option never written
    php = run_predicate(tmp_path, [("isDelegated", case) for case in cases])
    assert php == [
        not case["phabricator.silent"] and SERVICE_URIS_VERDICT.get(json.dumps(case.get(SERVICE_URI))) == VALID
        for case in cases
    ]
    unset = load_config({}).delivery
    service = [
        resolve(unset, LocalRead("local.json", dict(case)), None, "table").delegation.state == "delegated"
        for case in cases
    ]
    assert service == php


@pytest.mark.needs_tool("php")
def test_the_setup_checks_helpers_tell_cleartext_and_redirects_to_https(tmp_path: Path) -> None:
    cleartext = {
        "http://gorge-webhook:8160/": True,
        "http://10.0.0.5/": True,
        "http://127.0.0.1:8160/": False,
        "http://127.1.2.3/": False,
        "http://localhost:8160/": False,
        "http://LocalHost./": False,
        "http://[::1]:8160/": False,
        "http://[::2]/": True,
        "https://gorge.example.com/": False,
    }
    redirects = {
        "https://gorge.example.com/api/webhook/stats": "https://gorge.example.com/",
        "https://gorge-webhook:8160/readyz": "https://gorge-webhook:8160/",
        "https://[::1]:8443/x?y": "https://[::1]:8443/",
        "http://gorge.example.com/api/webhook/stats": None,
        "/api/webhook/stats": None,
        None: None,
    }
    answers = run_predicate(
        tmp_path,
        [("isCleartextURI", [uri]) for uri in cleartext] + [("getRedirectedURI", [uri]) for uri in redirects],
    )
    assert answers == [*cleartext.values(), *redirects.values()]


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
