"""The tree shows the two processes: what each folder may import is checked from the files themselves, and
the module map (docs/develop.md, "The module map") names every package and module there is, and no other."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


MAX_FUNCTION_LINES, MAX_FUNCTION_BRANCHES = 60, 15
_OWN_SCOPE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def branch_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The ways a function's own body can branch, as pylint's too-many-branches counts them: an `if` one, and
    one more for an `else` that is no `elif`; a loop one, and one for its `else`; a `try` one for each `except`,
    its `else` and its `finally`; a `match` one for each case. A function or class inside counts for itself."""
    count = 0
    pending: list[ast.AST] = list(ast.iter_child_nodes(function))
    while pending:
        node = pending.pop()
        if isinstance(node, _OWN_SCOPE):
            continue
        if isinstance(node, ast.If):
            count += 1 + (bool(node.orelse) and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            count += 1 + bool(node.orelse)
        elif isinstance(node, ast.Try):
            count += len(node.handlers) + bool(node.orelse) + bool(node.finalbody)
        elif isinstance(node, ast.Match):
            count += len(node.cases)
        pending.extend(ast.iter_child_nodes(node))
    return count


def functions_over_the_limits(source: str, name: str) -> list[str]:
    """Each function of `source` longer than MAX_FUNCTION_LINES (its `def` to its last line) or with more than
    MAX_FUNCTION_BRANCHES branches, as `name:line function lines=.. branches=..`."""
    over = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            branches = branch_count(node)
            if lines > MAX_FUNCTION_LINES or branches > MAX_FUNCTION_BRANCHES:
                over.append(f"{name}:{node.lineno} {node.name} lines={lines} branches={branches}")
    return over


def test_no_function_of_the_worker_is_over_60_lines_or_15_branches() -> None:
    """The worker reads top to bottom: a function that grows past these is split where its steps part."""
    worker = PACKAGE / "worker"
    over = [
        found
        for path in sorted(worker.rglob("*.py"))
        for found in functions_over_the_limits(path.read_text(), str(path.relative_to(PACKAGE)))
    ]
    assert over == []


def test_the_function_limits_see_too_many_lines_and_branches() -> None:
    branchy = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(15))
    branchy += "    try:\n        pass\n    except ValueError:\n        pass\n"
    assert [found.split(" ", 1)[1] for found in functions_over_the_limits(branchy, "m")] == ["f lines=35 branches=16"]
    inner = "def f(x):\n    def g(y):\n" + "".join(f"        if y == {i}:\n            pass\n" for i in range(16))
    assert [found.split(" ", 1)[1] for found in functions_over_the_limits(inner, "m")] == ["g lines=33 branches=16"]
    elifs = (
        "def f(x):\n" + "    if x:\n        pass\n" + "    elif x:\n        pass\n" * 14 + "    else:\n        pass\n"
    )
    assert functions_over_the_limits(elifs, "m") == ["m:1 f lines=33 branches=16"]
    long = "def f():\n" + "    x = 1\n" * 60
    assert functions_over_the_limits(long, "m") == ["m:1 f lines=61 branches=0"]
    assert functions_over_the_limits("def f():\n" + "    x = 1\n" * 59, "m") == []


@pytest.mark.parametrize("path", python_files("phorge"), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_phorges_values_and_rules_import_neither_process(path: Path) -> None:
    assert not [
        module for module in imports_of(path) if any(_under(module, side) for side in (WORKER, WEB, ALERTS, READS))
    ]


def test_the_settings_parser_reads_no_phorge_format() -> None:
    """config.py is the base layer: Phorge's formats (the partition map, the delivery-id list) are read on
    Phorge's side (phorge/formats.py) and handed to it."""
    assert not [module for module in imports_of(PACKAGE / "config.py") if _under(module, "webhook_delivery.phorge")]
    assert [
        m
        for m in imports_of(PACKAGE / "config.py", "from .phorge.cluster import X")
        if _under(m, "webhook_delivery.phorge")
    ]


def _map_lines() -> list[str]:
    """The module map's bullets, each on one line."""
    text = (ROOT / "docs" / "develop.md").read_text()
    section = text.split("\n### The module map\n", 1)[1].split("\n## ", 1)[0]
    bullets = re.split(r"\n(?=\* )", section.split("\n* ", 1)[1])
    return [" ".join(bullet.split()) for bullet in bullets]


def module_map(lines: list[str]) -> set[str]:
    """What the map names, as paths below webhook_delivery/: each bullet's package (`reads/`), and every module
    (`herald.py`) or package (`commands/`) it names, below that package."""
    named: set[str] = set()
    for line in lines:
        package, *names = re.findall(r"`([\w/]+(?:\.py|/))`", line)
        package = "" if package == "webhook_delivery/" else package
        named.add(package)
        named.update(package + name for name in names)
    return named - {""}


def modules_in_tree() -> set[str]:
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if "migrations" in relative.parts or relative == Path("__init__.py"):
            continue
        found.add(f"{relative.parent.as_posix()}/" if path.name == "__init__.py" else relative.as_posix())
    return found


def test_the_module_map_names_every_package_and_module_and_no_other() -> None:
    named, there = module_map(_map_lines()), modules_in_tree()
    assert sorted(named - there) == [], "named in the module map, not in the tree"
    assert sorted(there - named) == [], "in the tree, not named in the module map (docs/develop.md)"
    assert {"worker/store.py", "alerts/management/commands/", "management/options.py"} <= named


def test_the_module_map_check_sees_a_missing_and_an_extra_name() -> None:
    lines = _map_lines()
    without = [line.replace("`store.py`", "the store") for line in lines]
    assert modules_in_tree() - module_map(without) == {"worker/store.py"}
    extra = [*lines, "* `worker/`: `gone.py`"]
    assert module_map(extra) - modules_in_tree() == {"worker/gone.py"}


def test_no_comment_names_an_issue() -> None:
    """A comment says why, for whoever reads the code now; the issue that brought it is in the history."""
    found = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "gorge_site").rglob("*.py")]:
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type == tokenize.COMMENT and re.search(r"\bissues? #?\d+", token.string, re.IGNORECASE):
                found.append(f"{path.relative_to(ROOT)}:{token.start[0]}")
    assert found == []


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


TEST_LANES = ("unit", "db", "process", "browser")
# Test files named after something that is not one module of the project, each with what it tests instead.
NOT_A_MODULE = {
    "layout": "the tree itself: what each folder imports, the modules' sizes, circles of imports",
    "readme": "the pages: README.md, docs/, CHANGELOG.md",
    "lanes": "the suite's own lanes and its safety (tests/support/lanes.py, tests/support/settings.py)",
    "dockerfile": "the Dockerfile",
    "deploy_files": "docs/systemd/ and docs/compose.example.yml",
    "deploy_check": "Django's check --deploy over the documented production settings",
    "alert_rules": "the Prometheus rules in docs/prometheus/",
    "bench_smoke": "bench/",
    "phorge_patch": "contrib/phorge/, Phorge's side of the handover",
    "golden": "Phorge's own captures replayed through the whole delivery path (tests/fixtures/golden/)",
    "store_contract": "the contract store.Store and twins.MemoryStore both keep (tests/support/store_contract.py)",
    "isolation": "hooks kept apart across the worker's scheduling, sessions and lock session",
    "leaks": "no hook URI, key or token in any output: pages, JSON, the admin, metrics, SQL, log lines",
    "db_outage": "MariaDB restarted under a running worker",
    "large_properties": "large properties across the store, the job and the queue window",
    "sqlite_site": "Django's own tables on SQLite under a running worker and the pages",
    "migrations": "every migration since the last release keeps that release working (docs/develop.md's rule)",
    "upgrade": "the previous release's processes from git beside this tree's, migrated forward and back",
}


def module_names() -> set[str]:
    """What a test file may be named after: each module or package of webhook_delivery/ and gorge_site/ by its
    path below the top package joined with `_`, or any tail of it (phorge/config.py: `phorge_config` or
    `config`), `alerts/` also as `alert` (alerts/config.py: `alert_config`)."""
    names: set[str] = set()
    for top in (PACKAGE, ROOT / "gorge_site"):
        for path in top.rglob("*.py"):
            parts = list(path.relative_to(top).with_suffix("").parts)
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            for start in range(len(parts)):
                tail = parts[start:]
                names.add("_".join(tail))
                if tail[0] == "alerts" and len(tail) > 1:
                    names.add("_".join(["alert", *tail[1:]]))
    return names


def files_of_lane(lane: str) -> list[Path]:
    return sorted((ROOT / "tests" / lane).glob("test_*.py"))


@pytest.mark.parametrize("lane", TEST_LANES)
def test_every_test_file_is_named_after_the_module_it_tests(lane: str) -> None:
    """One file per module per lane, named after it, or a documented exception (NOT_A_MODULE): a file named
    after an issue or a review (test_hardening.py) says nothing of where its tests belong."""
    modules = module_names()
    misnamed = [
        path.name
        for path in files_of_lane(lane)
        if (name := path.stem.removeprefix("test_")) not in modules and name not in NOT_A_MODULE
    ]
    assert misnamed == []


def test_every_exception_to_the_test_file_names_is_still_used() -> None:
    used = {path.stem.removeprefix("test_") for lane in TEST_LANES for path in files_of_lane(lane)}
    assert set(NOT_A_MODULE) <= used
    assert not set(NOT_A_MODULE) & module_names(), "an exception that is a module's name is no exception"
    assert {"phorge_config", "config", "alert_config", "deliver_webhooks", "sessions"} <= module_names()
    assert "hardening" not in module_names() and "bad_input" not in module_names()
