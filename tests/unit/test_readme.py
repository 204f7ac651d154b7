"""The README stays true: its two set-up commands are what CI runs, every setting is documented, every
command and file it names exists, and its grant recipe gives exactly the documented privileges.

Here: what needs no database and no server process; the rest is in tests/db/test_readme.py."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
from pathlib import Path

from django.core.management import get_commands

from tests.support import ROOT
from tests.support.docs import README, code_blocks, environment_variables, readme_setup_commands


def make_targets_named(text: str) -> set[str]:
    """The targets of every `make` command in the text's sh blocks and inline code."""
    lines = [line for block in code_blocks(text) for line in block] + re.findall(r"`([^`\n]*\bmake [^`\n]*)`", text)
    named = set()
    for line in lines:
        words = shlex.split(line)
        named.update(words[index + 1] for index, word in enumerate(words[:-1]) if word == "make")
    return named


def make_target_exists(target: str) -> bool:
    """What make itself says: a dry run (`make -n`) of a target without a rule fails."""
    return subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, check=False).returncode == 0


def untracked(path: str) -> bool:
    patterns = [line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines() if line.strip()]
    return any(fnmatch.fnmatch(part, pattern) for part in path.split("/") for pattern in patterns)


def readme_paths() -> set[str]:
    """The project's own files and folders the README names: words whose first part is a top-level entry
    of the checkout (Phorge's `bin/config` is not one), git-ignored state such as `var/demo/` left out."""
    top = {entry.name for entry in ROOT.iterdir()}
    paths = set()
    for word in re.split(r"[\s`()\[\]<>|]+", README):
        path = word.lstrip("'\"*").rstrip("'\"*.,;:!?").rstrip("/")
        if path.split("/")[0] in top and not untracked(path):
            paths.add(path)
    return paths


def run_ci(tmp_path: Path, failing: str = "") -> tuple[int, list[str]]:
    """Runs .ci/run as an unprivileged user would (no install step) with a `make` that only records its
    arguments and fails for the target `failing`: the return code and the make commands, in order."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "make-calls"
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "make").write_text(
        f'#!/bin/sh\necho "make $*" >> {shlex.quote(str(calls))}\n[ "$*" != {shlex.quote(failing)} ]\n'
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([str(ROOT / ".ci/run")], env=env, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, calls.read_text().splitlines() if calls.exists() else []


def test_the_two_setup_commands_are_make_targets() -> None:
    """The demo command runs for real in tests/process/test_demo.py, the test command in CI (below)."""
    for command in readme_setup_commands():
        words = shlex.split(command)
        assert words[0] == "make" and len(words) == 2 and make_target_exists(words[1]), command


def test_ci_runs_exactly_the_readme_test_command_then_the_image_test(tmp_path: Path) -> None:
    _demo, test = readme_setup_commands()
    assert run_ci(tmp_path) == (0, [test, "make image-test"])
    assert make_target_exists("image-test") and "image-test" in make_targets_named(README)


def test_ci_stops_at_the_first_failing_command(tmp_path: Path) -> None:
    returncode, calls = run_ci(tmp_path, failing="test")
    assert returncode != 0 and calls == ["make test"]


def test_every_environment_variable_is_documented() -> None:
    names = environment_variables()
    assert {"GORGE_WEBHOOK_DATABASE_URL", "SECRET_KEY", "GORGE_SERVICE_TOKEN", "LOG_FORMAT"} <= names
    table = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    example = (ROOT / ".env.example").read_text()
    for name in sorted(names):
        assert f"| `{name}` |" in table, f"{name} is missing from the README's configuration table"
        assert re.search(rf"^# {name}=", example, re.MULTILINE), f"{name} is missing from .env.example"


def test_env_example_changes_nothing_when_copied() -> None:
    for line in (ROOT / ".env.example").read_text().splitlines():
        assert not line.strip() or line.startswith("#"), f".env.example must keep every setting commented: {line}"


def test_every_make_target_and_management_command_in_the_readme_exists() -> None:
    commands = get_commands()
    seen_manage = set()
    for block in code_blocks(README):
        for line in block:
            words = shlex.split(line.replace("\\\n", " "))
            seen_manage.update(words[index + 1] for index, word in enumerate(words[:-1]) if word == "manage.py")
    for inline in re.findall(r"`python manage\.py ([a-z_]+)", README):
        seen_manage.add(inline)
    seen_make = make_targets_named(README)
    assert {"demo", "test", "lint", "check", "unit"} <= seen_make
    missing = {target for target in seen_make if not make_target_exists(target)}
    assert not missing, f"make targets named in the README but missing: {missing}"
    assert {"deliver_webhooks", "print_grants", "migrate"} <= seen_manage
    assert seen_manage <= set(commands), f"unknown management commands: {seen_manage - set(commands)}"


def test_every_file_the_readme_names_exists() -> None:
    paths = readme_paths()
    assert {"docs/compose.example.yml", "docs/systemd", "scripts/grants.sql", ".env.example", "Dockerfile"} <= paths
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"the README names files that do not exist: {missing}"
