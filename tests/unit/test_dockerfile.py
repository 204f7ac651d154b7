"""The container image, checked without a Docker engine: the Dockerfile parsed and linted, and its web
command and HEALTHCHECK run for real against the production settings.

Here: what needs no database and no server process; the rest is in tests/process/test_dockerfile.py."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from django.core.management import load_command_class
from django.urls import resolve

from tests.support import ROOT
from tests.support.dockerfile import FINAL, GLOBAL_ARGS, STAGES, Stage, exec_form, healthcheck_command
from tests.support.docs import environment_variables, page

SECRET_WORDS = ("SECRET", "PASS", "TOKEN", "KEY")


def web_bind() -> tuple[str, int]:
    """The address the image's web command binds: gunicorn's --bind (or -b) in the final CMD."""
    command = exec_form(FINAL.all("CMD")[0])
    flag = next(index for index, word in enumerate(command) if word in {"--bind", "-b"})
    host, _, port = command[flag + 1].rpartition(":")
    return host, int(port)


def dockerignore_excludes(path: str) -> bool:
    """Whether .dockerignore keeps `path` out of the build context: the last matching pattern wins, `!` lets
    a path back in, and a pattern that matches a folder takes everything under it."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: end + 1]) for end in range(len(parts))]
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated, pattern = pattern.startswith("!"), pattern.removeprefix("!")
        candidates = {pattern, pattern.removeprefix("**/")}
        if any(fnmatch.fnmatch(prefix, candidate) for prefix in prefixes for candidate in candidates):
            excluded = not negated
    return excluded


def env_pairs(stage: Stage) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for args in stage.all("ENV"):
        for key, value in re.findall(r"(\w+)=(\S+)", args):
            pairs[key] = value
    return pairs


def apt_packages(stage: Stage) -> set[str]:
    packages: set[str] = set()
    for run in stage.all("RUN"):
        for command in run.split("&&"):
            if "apt-get install" in command:
                packages.update(word for word in command.split()[2:] if not word.startswith("-") and word != "install")
    return packages


def test_multi_stage_build_on_python_311_slim() -> None:
    assert len(STAGES) >= 2
    assert re.fullmatch(r"python:3\.11-slim(-bookworm)?", GLOBAL_ARGS.get("PYTHON_IMAGE", ""))
    assert all(stage.base == "${PYTHON_IMAGE}" for stage in STAGES)
    builder = next(stage for stage in STAGES if stage.name == "builder")
    assert {"libmariadb-dev", "libcurl4-openssl-dev", "pkg-config", "build-essential"} <= apt_packages(builder)
    assert any("pip wheel" in run for run in builder.all("RUN"))
    assert apt_packages(FINAL) == {"libmariadb3", "libcurl4", "ca-certificates"}
    assert any("from=builder" in run for run in FINAL.all("RUN")) or any(
        "--from=builder" in copy for copy in FINAL.all("COPY")
    ), "the runtime stage must take the wheels built in the builder"


def test_final_stage_runs_as_an_unprivileged_user() -> None:
    keywords = [instruction for instruction, _ in FINAL.instructions]
    users = FINAL.all("USER")
    assert users, "the final stage has no USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert keywords.index("CMD") > len(keywords) - 1 - keywords[::-1].index("USER")


def test_cmd_and_entrypoint_are_exec_form() -> None:
    commands = FINAL.all("CMD") + FINAL.all("ENTRYPOINT")
    assert commands
    for args in commands:
        exec_form(args)
    (cmd,) = FINAL.all("CMD")
    assert exec_form(cmd)[:2] == ["gunicorn", "gorge_site.wsgi:application"]


def test_healthcheck_probes_the_web_commands_port_with_the_images_python() -> None:
    """No curl in the image: the probe is the image's python, and by default it asks the web process's
    liveness URL on the port the web command binds (the real run is the test below)."""
    assert healthcheck_command()[0] == "python"
    url = urlsplit(env_pairs(FINAL)["GORGE_HEALTHCHECK_URL"])
    assert (url.scheme, url.hostname, url.port) == ("http", "127.0.0.1", web_bind()[1])
    assert resolve(url.path).url_name == "healthz"


def test_no_secret_in_the_image_environment() -> None:
    for stage in STAGES:
        for key in env_pairs(stage):
            assert not any(word in key.upper() for word in SECRET_WORDS), f"ENV {key} in stage {stage.name}"
    secret_args = [args for args in FINAL.all("ARG") if any(word in args.upper() for word in SECRET_WORDS)]
    for arg in secret_args:
        name = arg.split("=", 1)[0]
        users = [run for run in FINAL.all("RUN") if name in run]
        assert users and all("collectstatic" in run for run in users), f"ARG {name} may only feed collectstatic"


def test_static_files_are_collected_at_build_time() -> None:
    """One RUN collects the static files, non-interactively, with a throwaway key from a build ARG given
    inline to that command only (ENV would keep it in the image)."""
    collect = []
    for run in FINAL.all("RUN"):
        for command in run.split("&&"):
            words = shlex.split(command)
            if "manage.py" in words and words[words.index("manage.py") + 1 :][:1] == ["collectstatic"]:
                collect.append(words)
    assert len(collect) == 1
    (words,) = collect
    assert "--noinput" in words
    build_args = {arg.split("=", 1)[0] for arg in FINAL.all("ARG")}
    assignments = dict(word.split("=", 1) for word in words[: words.index("manage.py")] if "=" in word)
    assert re.fullmatch(r"\$\{(\w+)\}", assignments.get("SECRET_KEY", "")), "collectstatic gets its key inline"
    assert assignments["SECRET_KEY"][2:-1] in build_args


def test_copied_sources_exist_and_reach_the_build_context() -> None:
    for stage in STAGES:
        for args in stage.all("COPY"):
            if args.startswith("--from"):
                continue
            *sources, _destination = args.split()
            for source in sources:
                path = source.rstrip("/")
                assert (ROOT / path).exists(), f"COPY {source}: no such file in the project"
                assert not dockerignore_excludes(path), f"COPY {source} is excluded by .dockerignore"


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    for path in (".venv/bin/python", ".git/HEAD", ".env", ".env.production", "var/demo/herald.sqlite3"):
        assert dockerignore_excludes(path), f"{path} would reach the build context"
    for path in ("db.sqlite3", "webhook_delivery/__pycache__/store.cpython-311.pyc"):
        assert dockerignore_excludes(path), f"{path} would reach the build context"
    for path in ("manage.py", "webhook_delivery/worker/store.py", ".env.example"):
        assert not dockerignore_excludes(path), f"{path} is kept out of the build context"


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.is_file(), "hadolint is missing: it comes with requirements-dev.txt (make test installs it)"
    result = subprocess.run([str(hadolint), "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_compose_example_matches_the_image_and_the_settings() -> None:
    """The compose example runs the image docs/operate/install.md builds (`latest`, unless GORGE_VERSION names a
    release's tag: docs/operate/upgrade.md), a worker command its parser accepts with the metrics port its
    health check asks, and sets no variable the settings do not read."""
    services = yaml.safe_load((ROOT / "docs/compose.example.yml").read_text())["services"]
    tag = re.search(r"docker build -t (\S+) \.", page("docs/operate/install.md"))
    assert tag and services["web"]["image"] == services["worker"]["image"]
    assert services["web"]["image"] == f"{tag[1]}:${{GORGE_VERSION:-latest}}"
    worker = services["worker"]
    python, manage, name, *arguments = worker["command"]
    assert (python, manage) == ("python", "manage.py")
    options = load_command_class("webhook_delivery", name).create_parser("manage.py", name).parse_args(arguments)
    probe = urlsplit(worker["environment"]["GORGE_HEALTHCHECK_URL"])
    assert (probe.hostname, probe.port, probe.path) == ("127.0.0.1", options.metrics_port, "/metrics")
    assert worker["deploy"]["replicas"] >= 2, "the example shows several workers sharing the queue"
    known = environment_variables() | {"GORGE_HEALTHCHECK_URL"}
    ours = set(services["web"]["environment"]) | set(worker["environment"])
    assert ours and ours <= known, f"compose sets unknown variables: {ours - known}"
