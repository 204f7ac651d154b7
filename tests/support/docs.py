"""What the README and the pages it leads to say, and the shipped Prometheus rules, read the way their
tests read them."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.support import ROOT

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


def environment_variables() -> set[str]:
    names: set[str] = set()
    for source in ("gorge_site/settings.py", "webhook_delivery/config.py", "webhook_delivery/alerts/config.py"):
        text = (ROOT / source).read_text()
        names.update(ENV_READERS.findall(text), VARIABLE_CONSTANTS.findall(text))
    return names


RULES = ROOT / "docs" / "prometheus" / "gorge-webhook-rules.yml"


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]
