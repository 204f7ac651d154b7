"""Releases as the CHANGELOG and git record them: each `## X.Y.Z (date)` heading, the migrations its Upgrading
note gives ("Django's database at X.Y.Z: `app migration`, ..."), and the commit that set X.Y.Z in
pyproject.toml (else a tag vX.Y.Z: tags do not always reach a clone), unpacked with `git archive`."""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.support import ROOT

HEADING = re.compile(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)$", re.MULTILINE)
AT_RELEASE = re.compile(r"Django's database at (\S+): ((?:`[a-z_]+ \w+`[,.]?\s*)+)")
MIGRATION = re.compile(r"`([a-z_]+) (\w+)`")


@dataclass(frozen=True)
class Release:
    version: str
    date: str
    migrations: dict[str, str]  # app label: its last migration at this release


class NoRelease(Exception):
    """The previous release cannot be found, or its tree cannot be had: said plainly, never skipped."""


def releases(text: str | None = None) -> list[Release]:
    """The CHANGELOG's releases, newest first (`## Unreleased` is none)."""
    text = (ROOT / "CHANGELOG.md").read_text() if text is None else text
    headings = list(HEADING.finditer(text))
    found = []
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        section = text[heading.end() : end]
        migrations: dict[str, str] = {}
        for version, listed in AT_RELEASE.findall(section):
            if version == heading[1]:
                migrations.update(MIGRATION.findall(listed))
        found.append(Release(heading[1], heading[2], migrations))
    return found


def previous_release(version: str, text: str | None = None) -> Release:
    """The newest release other than `version` (a tree at a release commit is compared with the one before)."""
    for release in releases(text):
        if release.version != version:
            return release
    raise NoRelease(f"the CHANGELOG names no release before {version}")


def git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NoRelease(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()[:300]}")
    return done.stdout


def pyproject_version(commit: str, root: Path = ROOT) -> str | None:
    try:
        return str(tomllib.loads(git("show", f"{commit}:pyproject.toml", cwd=root))["project"]["version"])
    except (NoRelease, tomllib.TOMLDecodeError, KeyError):
        return None


def release_commit(version: str, root: Path = ROOT) -> str:
    """The commit that set `version` in pyproject.toml (the oldest that says it), else the tag v<version>."""
    try:
        shallow = git("rev-parse", "--is-shallow-repository", cwd=root).strip() == "true"
    except NoRelease as exc:
        raise NoRelease(f"{root} is not a git checkout, so release {version}'s tree cannot be had: {exc}") from exc
    if shallow:
        raise NoRelease(
            f"this clone is shallow: release {version}'s commit is not in its history. "
            "Fetch the whole history (git fetch --unshallow) to run the upgrade test."
        )
    searched = git("log", "--reverse", "--format=%H", f'-Sversion = "{version}"', "--", "pyproject.toml", cwd=root)
    for commit in searched.split():
        if pyproject_version(commit, root) == version:
            return commit
    try:
        return git("rev-parse", "--verify", "--quiet", f"refs/tags/v{version}^{{commit}}", cwd=root).strip()
    except NoRelease:
        raise NoRelease(
            f"no commit sets version {version} in pyproject.toml and there is no tag v{version}: the CHANGELOG "
            "names a release git does not have (was its release commit squashed away?)"
        ) from None


def unpack(commit: str, into: Path) -> Path:
    """The tree of `commit` in `into`, as `git archive` gives it (no .git, no untracked files)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into
