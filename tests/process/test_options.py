"""management/options.py: the commands take ASCII numbers in their ranges only, and a bad option is a clear error."""

from __future__ import annotations

import subprocess

from tests.support.helpers import worker_env
from tests.support.processes import manage


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return manage(*args, env=worker_env(**env), ok=False)


def test_bad_command_option_is_a_clear_error() -> None:
    result = _manage("deliver_webhooks", "--once", "--max-concurrent", "0")
    assert result.returncode != 0
    assert "expected a whole number from 1 to 1024, got '0'" in result.stderr


def test_the_commands_take_ascii_numbers_in_their_ranges_only() -> None:
    for args, expected in [
        (("--max-concurrent", "1_0"), "expected a whole number from 1 to 1024, got '1_0'"),
        (("--poll-interval-ms", "\u0661\u0665"), "expected a whole number from 10 to 3600000, got '\u0661\u0665'"),
        (
            ("--metrics-port", "\uff16\uff15\uff15\uff13\uff15"),
            "expected a TCP port from 1 to 65535, got '\uff16\uff15\uff15\uff13\uff15'",
        ),
    ]:
        result = _manage("deliver_webhooks", "--once", *args)
        assert result.returncode != 0 and expected in result.stderr, result.stderr
    watcher = _manage("watch_webhooks", "--once", "--metrics-port", "1_0")
    assert watcher.returncode != 0 and "expected a TCP port from 1 to 65535, got '1_0'" in watcher.stderr
