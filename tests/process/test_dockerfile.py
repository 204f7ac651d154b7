"""The container image, checked without a Docker engine: the Dockerfile parsed and linted, and its web
command and HEALTHCHECK run for real against the production settings."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from django.core.management import load_command_class
from django.urls import resolve

from tests.helpers import PHORGE_DB, Phorge, worker_env
from tests.test_readme import README, environment_variables

ROOT = Path(__file__).resolve().parent.parent
SECRET_WORDS = ("SECRET", "PASS", "TOKEN", "KEY")


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for instruction, args in self.instructions if instruction == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, each a list of (INSTRUCTION, arguments) with continuations joined."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.lstrip().startswith("#"):
            continue
        pending += raw.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        logical.append(re.sub(r"\s+", " ", pending.strip()))
        pending = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            match = re.fullmatch(r"(\S+)(?: AS (\S+))?", args, re.IGNORECASE)
            assert match, line
            stages.append(Stage(match[1], match[2] or str(len(stages))))
        elif not stages:
            assert instruction == "ARG", f"only ARG may precede the first FROM: {line}"
            name, _, default = args.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append((instruction, args))
    return global_args, stages


GLOBAL_ARGS, STAGES = parse_dockerfile((ROOT / "Dockerfile").read_text())
FINAL = STAGES[-1]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and value and all(isinstance(v, str) for v in value), args
    return value


def healthcheck_command() -> list[str]:
    (args,) = FINAL.all("HEALTHCHECK")
    options, _, command = args.partition("CMD ")
    given = dict(option.removeprefix("--").split("=", 1) for option in options.split())
    for option in ("interval", "timeout"):
        assert re.fullmatch(r"[1-9][0-9]*s", given.get(option, "")), f"HEALTHCHECK --{option} must be set: {args}"
    return exec_form(command)


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The documented production environment: DEBUG unset, a long random key, real host names, Phorge's
    local.json given (as `bin/config set` leaves it)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GORGE_", "DJANGO_", "DEBUG"))}
    local = tmp_path / "local.json"
    local.write_text('{\n    "mysql.host": "db",\n    "phabricator.base-uri": "https://phorge.example.org/"\n}\n')
    env.update(
        GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(local),
        DJANGO_SETTINGS_MODULE="gorge_site.settings",
        GORGE_ENV_FILE="/dev/null",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="webhooks.example.org",
        DATABASE_URL=f"sqlite:///{tmp_path / 'site.sqlite3'}",
    )
    env.update(extra)
    return env


def wait_for_http(url: str, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the process exited with {process.returncode}"
        try:
            urllib.request.urlopen(url, timeout=2).close()  # noqa: S310 - http on loopback
            return
        except urllib.error.HTTPError:
            return  # it answers; the status is the test's business
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing answered at {url}")


def test_multi_stage_build_on_python_311_slim() -> None:
    assert len(STAGES) >= 2
    assert re.fullmatch(r"python:3\.11-slim(-bookworm)?", GLOBAL_ARGS.get("PYTHON_IMAGE", ""))
    assert all(stage.base == "${PYTHON_IMAGE}" for stage in STAGES)
    builder = next(stage for stage in STAGES if stage.name == "builder")
    assert {"libmariadb-dev", "pkg-config", "build-essential"} <= apt_packages(builder)
    assert any("pip wheel" in run for run in builder.all("RUN"))
    assert apt_packages(FINAL) == {"libmariadb3", "ca-certificates"}
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


def test_image_web_command_and_healthcheck_work_with_production_settings(tmp_path: Path) -> None:
    port = free_port()
    command = [arg.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for arg in exec_form(FINAL.all("CMD")[0])]
    command[0] = str(Path(sys.executable).parent / command[0])
    env = production_env(tmp_path, WEB_CONCURRENCY="1")
    web = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", web)
        probe = healthcheck_command()
        probe[0] = sys.executable
        healthy = subprocess.run(probe, env={**env, "GORGE_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"})
        assert healthy.returncode == 0
        wrong_host = subprocess.run(
            probe,
            env={**env, "ALLOWED_HOSTS": "", "GORGE_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"},
            capture_output=True,
        )
        assert wrong_host.returncode != 0, "a rejected Host header must make the check fail"
    finally:
        web.send_signal(signal.SIGTERM)
        web.communicate(timeout=30)
    down = subprocess.run(
        probe, env={**env, "GORGE_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"}, capture_output=True
    )
    assert down.returncode != 0, "the check must fail when nothing answers"


def test_access_log_leaves_out_query_strings(tmp_path: Path) -> None:
    port = free_port()
    command = [arg.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for arg in exec_form(FINAL.all("CMD")[0])]
    command[0] = str(Path(sys.executable).parent / command[0])
    env = production_env(tmp_path, WEB_CONCURRENCY="1", GORGE_SERVICE_TOKEN="t0ken-" + secrets.token_hex(8))
    web = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", web)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/healthz?token={env['GORGE_SERVICE_TOKEN']}",
            headers={"Host": "webhooks.example.org"},
        )
        urllib.request.urlopen(request, timeout=5).close()  # noqa: S310 - http on loopback
    finally:
        web.send_signal(signal.SIGTERM)
        out, _err = web.communicate(timeout=30)
    log = out.decode()
    assert '"GET /healthz" 200' in log
    assert env["GORGE_SERVICE_TOKEN"] not in log and "token=" not in log


@PHORGE_DB
def test_worker_command_and_its_healthcheck(phorge: Phorge, tmp_path: Path) -> None:
    port = free_port()
    env = worker_env(
        DJANGO_SETTINGS_MODULE="gorge_site.settings",
        GORGE_ENV_FILE="/dev/null",
        SECRET_KEY=secrets.token_urlsafe(50),
        DATABASE_URL=f"sqlite:///{tmp_path / 'site.sqlite3'}",
        GORGE_HEALTHCHECK_URL=f"http://127.0.0.1:{port}/metrics",
    )
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "deliver_webhooks", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/metrics", worker)
        probe = healthcheck_command()
        probe[0] = sys.executable
        assert subprocess.run(probe, env=env).returncode == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err.decode()[-2000:]


def test_compose_example_matches_the_image_and_the_settings() -> None:
    """The compose example runs the image the README builds, a worker command its parser accepts with the
    metrics port its health check asks, and sets no variable the settings do not read."""
    services = yaml.safe_load((ROOT / "docs/compose.example.yml").read_text())["services"]
    tag = re.search(r"docker build -t (\S+) \.", README)
    assert tag and services["web"]["image"] == services["worker"]["image"] == tag[1]
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
