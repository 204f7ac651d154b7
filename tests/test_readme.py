"""The README stays true: its two set-up commands are what CI runs, every setting is documented, every
command it names exists, and its grant recipe gives exactly the documented privileges."""

from __future__ import annotations

import re
import secrets
import shlex
from pathlib import Path

import MySQLdb
import pytest
from django.conf import settings
from django.core.management import get_commands

from tests.helpers import PHORGE_DB, Phorge, mysql_admin

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ENV_READERS = re.compile(
    r"""(?:environ\.get|env\.list|_flag|r\.raw|r\.integer|r\.seconds|r\.env\.get)\(\s*["']([A-Z][A-Z0-9_]+)["']"""
)


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
    assert "demo" in demo and "test" in test
    return demo, test


def ci_commands() -> list[str]:
    """The command lines of .ci/run outside its install block (`if ... fi`), comments dropped."""
    commands, depth = [], 0
    for raw in (ROOT / ".ci/run").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("if "):
            depth += 1
        elif line == "fi":
            depth -= 1
        elif depth == 0 and not line.startswith(("set ", "cd ")):
            commands.append(line)
    return commands


def environment_variables() -> set[str]:
    names: set[str] = set()
    for source in ("gorge_site/settings.py", "webhook_delivery/config.py", "webhook_delivery/alerts/config.py"):
        names.update(ENV_READERS.findall((ROOT / source).read_text()))
    return names


def test_the_two_setup_commands_are_make_demo_and_make_test() -> None:
    assert readme_setup_commands() == ("make demo", "make test")


def test_ci_runs_exactly_the_readme_test_command_then_the_image_test() -> None:
    _demo, test = readme_setup_commands()
    assert ci_commands() == [test, "make image-test"]
    assert "make image-test" in README


def test_ci_script_is_executable_and_strict() -> None:
    run = ROOT / ".ci/run"
    assert run.stat().st_mode & 0o111, ".ci/run must be executable"
    assert run.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in run.read_text()


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
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.MULTILINE))
    commands = get_commands()
    seen_make, seen_manage = set(), set()
    for block in code_blocks(README):
        for line in block:
            words = shlex.split(line.replace("\\\n", " "))
            for index, word in enumerate(words):
                if word == "make" and index + 1 < len(words):
                    seen_make.add(words[index + 1])
                if word == "manage.py" and index + 1 < len(words):
                    seen_manage.add(words[index + 1])
    for inline in re.findall(r"`python manage\.py ([a-z_]+)", README):
        seen_manage.add(inline)
    assert {"demo", "test", "lint"} <= seen_make
    assert seen_make <= targets, f"make targets named in the README but missing: {seen_make - targets}"
    assert {"deliver_webhooks", "print_grants", "migrate"} <= seen_manage
    assert seen_manage <= set(commands), f"unknown management commands: {seen_manage - set(commands)}"


def test_readme_points_at_files_that_exist() -> None:
    for path in ("docs/compose.example.yml", "scripts/grants.sql", ".env.example", "Dockerfile"):
        assert path in README or path.split("/")[-1] in README
        assert (ROOT / path).is_file(), path


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
