"""This tree's version, the one place it is read from: `[project] version` of pyproject.toml beside
manage.py, read once. The project is run from its tree, never installed, so importlib.metadata knows
nothing of it; the image copies pyproject.toml for this (the Dockerfile).

A tree from a release says that release (`0.2.0`); a tree from main says the next one with `.dev0`
(`0.3.0.dev0`), so that the two are told apart. An unreadable file gives `unknown`, and the system
check gorge.E004 stops every command with the reason (`PROBLEM`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# Semantic versions as PEP 440 spells them (pyproject.toml must be PEP 440): 1.2.3, or 1.2.3.devN on main.
FORMAT = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(\.dev(0|[1-9]\d*))?")
UNKNOWN = "unknown"


def read(path: Path = PYPROJECT) -> tuple[str, str | None]:
    """(the version, None), or (UNKNOWN, why) when the file cannot give one."""
    try:
        with path.open("rb") as file:
            value = tomllib.load(file).get("project", {}).get("version")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return UNKNOWN, f"{path} cannot be read ({type(exc).__name__}): this tree's version is unknown"
    if not isinstance(value, str) or FORMAT.fullmatch(value) is None:
        return UNKNOWN, f"{path}: [project] version is not a version like 1.2.3 or 1.3.0.dev0"
    return value, None


VERSION, PROBLEM = read()
