"""The tree shows the two processes: what each folder may import is checked from the files themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "webhook_delivery"
WORKER = "webhook_delivery.worker"
WEB = "webhook_delivery.web"
ALERTS = "webhook_delivery.alerts"
READS = "webhook_delivery.reads"
ALERT_MODELS = "webhook_delivery.alerts.models"  # the alert state's tables: read by reads/alert_state.py

# Django finds these at the app's root; they serve pages, so they count as the web side.
WEB_DISCOVERY = ["admin.py", "urls.py", "templatetags", "records/admin.py", "phorge_auth"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, text: str | None = None) -> set[str]:
    """Every module `path` imports, relative imports resolved, `from x import y` counted as x and x.y."""
    here = _module_name(path).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def python_files(*places: str) -> list[Path]:
    files: list[Path] = []
    for place in places:
        target = PACKAGE / place
        files.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target])
    assert files and all(path.is_file() for path in files), places
    return files


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("path", python_files("web", *WEB_DISCOVERY), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_nothing_on_the_web_side_imports_the_worker_or_the_watcher(path: Path) -> None:
    assert not [module for module in imports_of(path) if _under(module, WORKER) or _under(module, ALERTS)]


@pytest.mark.parametrize("path", python_files("alerts"), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_the_watcher_imports_neither_the_web_side_nor_the_worker(path: Path) -> None:
    assert not [module for module in imports_of(path) if _under(module, WORKER) or _under(module, WEB)]


@pytest.mark.parametrize("path", python_files("reads"), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_the_shared_reads_import_no_process(path: Path) -> None:
    """reads/ is what the pages and the watcher both read through; it depends on neither (the alert
    state's models aside, which it reads)."""
    found = [
        module
        for module in imports_of(path)
        if _under(module, WORKER)
        or _under(module, WEB)
        or (_under(module, ALERTS) and not _under(module, ALERT_MODELS))
    ]
    assert not found


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}


@pytest.mark.parametrize("path", python_files("phorge"), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_phorges_values_and_rules_import_neither_process(path: Path) -> None:
    assert not [
        module for module in imports_of(path) if any(_under(module, side) for side in (WORKER, WEB, ALERTS, READS))
    ]


def test_the_dispatcher_touches_no_database() -> None:
    imported = imports_of(PACKAGE / "worker" / "dispatcher.py")
    assert not [m for m in imported if m.rsplit(".", 1)[-1] in {"store", "job", "sessions"} or _under(m, "django.db")]


def test_the_check_sees_forbidden_imports() -> None:
    """The rules above can fail: relative, absolute and package imports into worker/ are all seen."""
    probe = PACKAGE / "web" / "probe.py"
    forbidden = [
        "from ..worker.store import Store",
        "from webhook_delivery.worker import job",
        "import webhook_delivery.worker",
    ]
    for text in forbidden:
        assert [module for module in imports_of(probe, text) if _under(module, WORKER)], text
    assert not [module for module in imports_of(probe, "from .selectors import hooks") if _under(module, WORKER)]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of `graph`: each strongly connected set of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            circle = []
            while (top := stack.pop()) != module:
                circle.append(top)
            if circle:
                found.append(sorted([module, *circle]))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_takes_part_in_a_circle_of_imports() -> None:
    """Imports inside functions and under TYPE_CHECKING count too: a circle hidden there is still one (the
    alert config and the Apprise channels were one, config -> apprise_channels -> channels -> config)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}
    assert _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]], "the check sees one"
