"""The README and the pages it leads to stay true: its two set-up commands are what CI runs, it stays a
front page (under 200 lines) from which every page and every section of the old single-page README is
reachable, every link and anchor resolves, every setting is documented in docs/operate/configuration.md,
and every command and file the pages name exists.

Here: what needs no database and no server process; the grant recipe is tested in tests/db/test_readme.py."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
from pathlib import Path

from django.core.management import get_commands

from tests.support import ROOT
from tests.support.docs import (
    CONFIGURATION_PAGE,
    OLD_SECTIONS,
    PAGES,
    README,
    anchors,
    code_blocks,
    environment_variables,
    headings,
    page,
    reachable_from_readme,
    readme_setup_commands,
    relative_links,
)


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


def named_paths(text: str) -> set[str]:
    """The project's own files and folders a page names: words whose first part is a top-level entry
    of the checkout (Phorge's `bin/config` is not one), git-ignored state such as `var/demo/` left out."""
    top = {entry.name for entry in ROOT.iterdir()}
    paths = set()
    for word in re.split(r"[\s`()\[\]<>|]+", text):
        path = word.split("#", 1)[0].lstrip("'\"*").rstrip("'\"*.,;:!?").rstrip("/")
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
    assert make_target_exists("image-test") and "image-test" in make_targets_named(page("docs/develop.md"))


def test_ci_stops_at_the_first_failing_command(tmp_path: Path) -> None:
    returncode, calls = run_ci(tmp_path, failing="test")
    assert returncode != 0 and calls == ["make test"]


def test_every_environment_variable_is_documented() -> None:
    names = environment_variables()
    assert {"GORGE_WEBHOOK_DATABASE_URL", "SECRET_KEY", "GORGE_SERVICE_TOKEN", "LOG_FORMAT"} <= names
    assert {"GORGE_WEBHOOK_SILENT", "GORGE_ALERT_GC_HOURS", "GORGE_WEBHOOK_CLUSTER_DATABASES"} <= names
    table = "\n".join(line for line in page(CONFIGURATION_PAGE).splitlines() if line.startswith("| `"))
    example = (ROOT / ".env.example").read_text()
    for name in sorted(names):
        assert f"| `{name}` |" in table, f"{name} is missing from the table in {CONFIGURATION_PAGE}"
        assert re.search(rf"^# {name}=", example, re.MULTILINE), f"{name} is missing from .env.example"
    assert "[`.env.example`](../../.env.example)" in page(CONFIGURATION_PAGE)


def test_env_example_changes_nothing_when_copied() -> None:
    for line in (ROOT / ".env.example").read_text().splitlines():
        assert not line.strip() or line.startswith("#"), f".env.example must keep every setting commented: {line}"


def test_every_make_target_and_management_command_in_the_pages_exists() -> None:
    commands = get_commands()
    seen_manage: set[str] = set()
    seen_make: set[str] = set()
    for path in PAGES:
        text = page(path)
        for block in code_blocks(text):
            for line in block:
                words = shlex.split(line.replace("\\\n", " "))
                seen_manage.update(words[index + 1] for index, word in enumerate(words[:-1]) if word == "manage.py")
        seen_manage.update(re.findall(r"`python manage\.py ([a-z_]+)", text))
        seen_make |= make_targets_named(text)
    assert {"demo", "test"} <= make_targets_named(README)
    assert {"demo", "test", "lint", "check", "unit"} <= seen_make
    missing = {target for target in seen_make if not make_target_exists(target)}
    assert not missing, f"make targets named in the pages but missing: {missing}"
    assert {"deliver_webhooks", "print_grants", "migrate"} <= seen_manage
    assert seen_manage <= set(commands), f"unknown management commands: {seen_manage - set(commands)}"


def test_every_file_the_pages_name_exists() -> None:
    paths = set().union(*(named_paths(page(path)) for path in PAGES))
    assert {"docs/compose.example.yml", "docs/systemd", "scripts/grants.sql", ".env.example", "Dockerfile"} <= paths
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"the pages name files that do not exist: {missing}"


def test_the_readme_is_a_front_page() -> None:
    """What it is, the two commands, the way to production in numbered steps that each link to their page,
    and where to read next: under 200 lines."""
    lines = README.splitlines()
    assert len(lines) < 200, f"the README has {len(lines)} lines: move the detail to a page under docs/"
    assert headings(README)[1:] == ["Quick start", "Run it in production", "Where to read next"]
    production = README.split("## Run it in production", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. (.*(?:\n   .*)*)", production, re.MULTILINE)
    assert 3 <= len(steps) <= 9, steps
    for step in steps:
        assert re.search(r"\]\(docs/operate/[a-z-]+\.md(#[a-z0-9-]+)?\)", step), f"a step without its page: {step}"
    next_reads = README.split("## Where to read next", 1)[1]
    for target in (
        "docs/operate/README.md",
        "docs/performance.md",
        "docs/develop.md",
        "CHANGELOG.md",
        "docs/prometheus/",
        "docs/systemd/",
        "docs/compose.example.yml",
    ):
        assert f"]({target})" in next_reads, f"Where to read next does not link {target}"


def test_every_link_and_anchor_of_the_pages_resolves() -> None:
    for path in PAGES:
        for target, anchor in relative_links(path):
            assert (ROOT / target).exists(), f"{path} links to {target}, which does not exist"
            if anchor:
                assert target.endswith(".md"), f"{path}: an anchor into {target}"
                assert anchor in anchors(page(target)), f"{path} links to {target}#{anchor}: no such heading"


def test_every_page_and_every_old_section_is_reachable_from_the_readme() -> None:
    reachable = reachable_from_readme()
    unreachable = sorted(set(PAGES) - reachable)
    assert not unreachable, f"pages no link from the README leads to: {unreachable}"
    for old, path, heading in OLD_SECTIONS:
        assert heading in headings(page(path)), f"the old README's {old!r} is no longer {heading!r} in {path}"
        assert path in reachable, path


def test_the_bot_steps_say_what_phorge_shows_and_warn_of_herald_rules() -> None:
    """Issue 39, finding 7 (from a run against a real Phorge): "Create Bot User" is a choice on
    /people/create/, followed by Continue; the profile's item is "Manage User"; and the bot's own task edits
    fire Herald rules."""
    page = " ".join((ROOT / "docs" / "operate" / "monitoring.md").read_text().split())
    assert 'People > Create New User (`/people/create/`): choose "Create Bot User", then Continue' in page
    assert "On the bot's profile: Manage User > Edit Settings > Conduit API Tokens > Generate Token" in page
    assert "/people/new/bot/" not in page
    assert "**The bot's edits fire Herald rules.**" in page and "the failing hook itself" in page
