"""What the README and the shipped Prometheus rules say, read the way their tests read them."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.support import ROOT

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
    return demo, test


def environment_variables() -> set[str]:
    names: set[str] = set()
    for source in ("gorge_site/settings.py", "webhook_delivery/config.py", "webhook_delivery/alerts/config.py"):
        names.update(ENV_READERS.findall((ROOT / source).read_text()))
    return names


RULES = ROOT / "docs" / "prometheus" / "gorge-webhook-rules.yml"


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]
