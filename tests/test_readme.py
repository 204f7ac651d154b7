"""The README and the pages it leads to stay true: its two set-up commands are what CI runs, it stays a
front page (under 200 lines) from which every page and every section of the old single-page README is
reachable, every link and anchor resolves, every setting is documented in docs/operate/configuration.md,
every command and file the pages name exists, and the grant recipe gives exactly the documented
privileges."""

from __future__ import annotations

import fnmatch
import re
import secrets
import shlex
import subprocess
from pathlib import Path

import MySQLdb
import pytest
from django.conf import settings
from django.core.management import get_commands

from tests.helpers import PHORGE_DB, Phorge, mysql_admin

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CONFIGURATION_PAGE = "docs/operate/configuration.md"
# Every page of the documentation: the front page, the changelog, the pages under docs/ and the bench's.
PAGES = sorted(
    {"README.md", "CHANGELOG.md", "bench/README.md"}
    | {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md")}
)
ENV_READERS = re.compile(
    r"""(?:environ\.get|env\.list|_flag|r\.raw|r\.integer|r\.seconds|r\.boolean|r\.env\.get|_number)\(\s*"""
    r"""(?:environ,\s*)?["']([A-Z][A-Z0-9_]+)["']"""
)
VARIABLE_CONSTANTS = re.compile(r"""^[A-Z_]*VARIABLE = ["']([A-Z][A-Z0-9_]+)["']""", re.MULTILINE)
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")

# Every section of the README before it became a front page, and the page and heading that hold it now.
OLD_SECTIONS = [
    ("Quick start", "README.md", "Quick start"),
    ("Configuration", CONFIGURATION_PAGE, "Configuration"),
    ("Dependencies, and why each one", "docs/develop.md", "Dependencies, and why each one"),
    ("Deployment", "docs/operate/install.md", "Install"),
    ("One image, two processes", "docs/operate/install.md", "One image, two processes"),
    ("First start", "docs/operate/install.md", "First start"),
    ("Sign in with Phorge", "docs/operate/sign-in.md", "Sign in with Phorge"),
    ("Several workers, several hosts", "docs/operate/install.md", "Several workers, several hosts"),
    (
        "Failing receivers, and a backlog after an outage",
        "docs/operate/recovery.md",
        "Failing receivers, and a backlog after an outage",
    ),
    (
        "Holding a hook while its receiver is repaired",
        "docs/operate/recovery.md",
        "Holding a hook while its receiver is repaired",
    ),
    (
        "For receivers: dropping the duplicate after a crash",
        "docs/operate/recovery.md",
        "For receivers: dropping the duplicate after a crash",
    ),
    ("What each request ends as", "docs/operate/recovery.md", "What each request ends as"),
    (
        "Every attempt on record, and resending what failed",
        "docs/operate/recovery.md",
        "Every attempt on record, and resending what failed",
    ),
    (
        "Partitioned Phorge databases (`cluster.databases` with `partition`)",
        "docs/operate/partitions.md",
        "Partitioned Phorge databases (`cluster.databases` with `partition`)",
    ),
    ("A replica for the web side", "docs/operate/partitions.md", "A replica for the web side"),
    ("Docker Compose", "docs/operate/install.md", "Docker Compose"),
    ("Taking over from Phorge's PHP delivery", "docs/operate/handover.md", "Taking over from Phorge's PHP delivery"),
    ("Phorge's own settings", CONFIGURATION_PAGE, "Phorge's own settings"),
    ("Monitoring", "docs/operate/monitoring.md", "Monitoring and alerts"),
    ("Telling a human", "docs/operate/monitoring.md", "Telling a human"),
    ("Prometheus alerting rules", "docs/operate/monitoring.md", "Prometheus alerting rules"),
    ("Metrics, probes and logs", "docs/operate/monitoring.md", "Metrics, probes and logs"),
    ("Security notes", "docs/operate/security.md", "Security"),
    ("Performance", "docs/performance.md", "Performance"),
    ("Development", "docs/develop.md", "The lanes"),
]


def page(path: str) -> str:
    return (ROOT / path).read_text()


def headings(text: str) -> list[str]:
    """The Markdown headings of a page, outside its fenced code blocks."""
    return [match[1].strip() for match in re.finditer(r"^#{1,6} (.+)$", FENCED.sub("", text), re.MULTILINE)]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation dropped, spaces as hyphens, -1, -2 ...
    for repeats."""
    found: set[str] = set()
    for heading in headings(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found


def relative_links(path: str) -> list[tuple[str, str]]:
    """(target path from the checkout's root, anchor) of every relative link of a page."""
    links = []
    for target in LINK.findall(FENCED.sub("", page(path))):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        resolved = (ROOT / path).parent / file_part if file_part else ROOT / path
        links.append((resolved.resolve().relative_to(ROOT).as_posix(), anchor))
    return links


def reachable_from_readme() -> set[str]:
    """The pages a reader reaches from the README by following links (a folder counts as its README.md)."""
    seen, todo = {"README.md"}, ["README.md"]
    while todo:
        for target, _anchor in relative_links(todo.pop()):
            if (ROOT / target).is_dir():
                target = f"{target}/README.md" if target != "." else "README.md"
            if target.endswith(".md") and (ROOT / target).is_file() and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def code_blocks(text: str) -> list[list[str]]:
    """The command lines of each fenced sh block (comments and blank lines dropped)."""
    blocks = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
        blocks.append([line for line in lines if line and not line.startswith("#")])
    return blocks


def readme_setup_commands() -> tuple[str, str]:
    """The demo and test commands of the README's "Quick start": its first code block, exactly two lines."""
    quick_start = README.split("## Quick start", 1)[1]
    first = code_blocks(quick_start)[0]
    assert len(first) == 2, f"the quick start must be exactly two commands, got {first}"
    demo, test = first
    return demo, test


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


def environment_variables() -> set[str]:
    names: set[str] = set()
    for source in ("gorge_site/settings.py", "webhook_delivery/config.py", "webhook_delivery/alerts/config.py"):
        text = (ROOT / source).read_text()
        names.update(ENV_READERS.findall(text), VARIABLE_CONSTANTS.findall(text))
    return names


def test_the_two_setup_commands_are_make_targets() -> None:
    """The demo command runs for real in tests/test_demo.py, the test command in CI (below)."""
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


@PHORGE_DB
def test_grants_script_gives_exactly_the_documented_privileges(phorge: Phorge) -> None:
    database = settings.DATABASES["phorge"]["NAME"]
    namespace = database.removesuffix("_herald")
    user, password = f"gw_grants_{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    script = (ROOT / "scripts/grants.sql").read_text()
    for placeholder, value in (("@NAMESPACE@", namespace), ("@USER@", user), ("@HOST@", "%"), ("@PASSWORD@", password)):
        script = script.replace(placeholder, value)
    assert "@" not in script.replace(f"'{user}'@'%'", ""), "a placeholder was left over"
    statements = [s.strip() for s in re.sub(r"^--.*$", "", script, flags=re.MULTILINE).split(";") if s.strip()]
    admin = mysql_admin()
    cursor = admin.cursor()
    try:
        for statement in statements:
            cursor.execute(statement)
        cursor.execute(f"SHOW GRANTS FOR '{user}'@'%'")
        grants = sorted(row[0] for row in cursor.fetchall())
        usage = [grant for grant in grants if grant.startswith(f"GRANT USAGE ON *.* TO `{user}`@`%`")]
        assert len(usage) == 1, grants
        assert [grant for grant in grants if grant not in usage] == [
            f"GRANT SELECT ON `{database}`.`herald_webhook` TO `{user}`@`%`",
            f"GRANT SELECT, UPDATE ON `{database}`.`herald_webhookrequest` TO `{user}`@`%`",
        ]
        hook = phorge.hook("https://example.invalid/hook")
        request = phorge.request(hook)
        db = settings.DATABASES["phorge"]
        restricted = MySQLdb.connect(
            host=db["HOST"], port=int(db["PORT"]), user=user, password=password, database=database, autocommit=True
        )
        try:
            as_user = restricted.cursor()
            as_user.execute("SELECT COUNT(*) FROM herald_webhook")
            assert as_user.fetchone() == (1,)
            as_user.execute(
                "UPDATE herald_webhookrequest SET dateModified = dateModified + 1 WHERE phid = %s", (request,)
            )
            assert as_user.rowcount == 1
            for forbidden in (
                "DELETE FROM herald_webhookrequest",
                "UPDATE herald_webhook SET name = 'x'",
                "CREATE TABLE gw_nope (id int)",
                f"INSERT INTO herald_webhookrequest SELECT * FROM herald_webhookrequest WHERE phid = '{request}'",
            ):
                with pytest.raises(MySQLdb.OperationalError) as denied:
                    as_user.execute(forbidden)
                assert denied.value.args[0] in {1142, 1044}, forbidden  # command denied / access denied
        finally:
            restricted.close()
    finally:
        cursor.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        admin.close()
