"""The Dockerfile as its tests read it: global ARGs and stages, each with its instructions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from tests.support import ROOT


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
