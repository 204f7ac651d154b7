"""Every log line carries a stable event key (`extra={"event": ...}`, a field of both formats of logformat.py),
which operators filter on and the tests match: read from the source of every module of the package."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tests.support import ROOT
from webhook_delivery.phorge_auth import events

PACKAGE = ROOT / "webhook_delivery"
LEVELS = {"debug", "info", "warning", "error", "exception", "critical", "log"}
# Helpers that build a call's `extra` with its event key (phorge_auth/events.py).
EVENT_HELPERS = {"events.about", "events.event"}


def _receiver(call: ast.Call) -> str:
    assert isinstance(call.func, ast.Attribute)
    target = call.func.value
    if isinstance(target, ast.Name):
        return target.id
    return target.attr if isinstance(target, ast.Attribute) else ""


def _keyed(call: ast.Call) -> bool:
    for keyword in call.keywords:
        if keyword.arg != "extra":
            continue
        if isinstance(keyword.value, ast.Dict):
            return any(isinstance(key, ast.Constant) and key.value == "event" for key in keyword.value.keys)
        if isinstance(keyword.value, ast.Call):
            return ast.unparse(keyword.value.func) in EVENT_HELPERS
    return False


def log_calls(path: Path) -> list[tuple[int, bool]]:
    """(line, whether it has an event key) of each call of a logger's level method in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LEVELS
            and "log" in _receiver(node).lower()
        ):
            found.append((node.lineno, _keyed(node)))
    return found


def unkeyed() -> dict[str, list[int]]:
    missing: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = [line for line, keyed in log_calls(path) if not keyed]
        if lines:
            missing[str(path.relative_to(PACKAGE))] = lines
    return missing


def test_every_log_call_has_an_event_key() -> None:
    assert unkeyed() == {}


def test_the_check_sees_calls_with_and_without_a_key(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "logger.info('a')\n"
        "self.logger.warning('b', extra={'hook': 1})\n"
        "logging.error('c', extra=fields)\n"
        "logger.info('d', extra={'event': 'x.y'})\n"
        "log.exception('e', extra=events.about(events.REFUSED, 'u', None))\n"
        "logger.log(20, 'f', extra={'event': 'x.z', 'n': 1})\n"
        "results.info('not a logger')\n"
    )
    assert log_calls(probe) == [(1, False), (2, False), (3, False), (4, True), (5, True), (6, True)]
    assert events.event("x.y")["event"] == "x.y" and events.about("x.y", "user", None)["event"] == "x.y"


def test_json_log_lines_carry_no_raw_control_or_format_character() -> None:
    import logging

    from webhook_delivery.logformat import JsonFormatter

    hostile = "a\x7f\x85\u2028\u202ez\x1b[2J"
    record = logging.LogRecord("webhook_delivery.x", logging.INFO, __file__, 1, hostile, None, None)
    record.hook = hostile
    line = JsonFormatter().format(record)
    assert line.isascii() and line.isprintable()
    assert json.loads(line)["message"] == hostile and json.loads(line)["hook"] == hostile
