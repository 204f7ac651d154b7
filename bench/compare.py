"""Two versions side by side in one go: `make bench` figures of an earlier commit and of this tree.

    .venv/bin/python bench/compare.py BASE [--new REV] [--rounds K] [-- BENCH_ARGS...]   (default: --quick, 2 rounds)

BASE's sources (and NEW's, with --new; else this working tree) are unpacked with `git archive` into a
temporary directory beside this tree's virtualenv. This tree's bench/run.py measures both (the same
figures, measured the same way; BENCH_TREE names the tree whose worker it starts), in alternating order
each round (base-new, new-base, ...) so that drift of a shared machine falls on both. A figure of the
worker's insides that a tree does not have (the queue window's idle poll, before it existed) is left
out. It prints each figure's median for both and the ratio new/base: the figures are noisy in absolute
terms, the ratio of runs made together is what a change is judged by.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
# "   ... rows read per delivery        5.07 rows   5.06 .. 5.07": the median, then its unit if it has one
# ("connections to Phorge's database     6   6 .. 6" has none); 1,356 /s has a thousands separator.
ROW = re.compile(r"^(?P<label>\s*\S.*?)\s{2,}(?P<value>-?[\d,.]+)(?: (?P<unit>[^\s\d.]\S*))?(?:\s|$)")


def figures(output: str) -> dict[str, tuple[float, str]]:
    """The table's rows: label -> (value, unit), read from bench/run.py's output. A row is named by its
    figure's number ("2. ... worker CPU per delivery"), and where that is not enough (the same "... that,
    as % of the bare client" under two rows of figure 2) by the row it is under as well."""
    found: dict[str, tuple[float, str]] = {}
    in_table = False
    section = parent = ""
    for line in output.splitlines():
        if line.startswith("figure "):
            in_table = True
            continue
        if in_table and not line.strip():
            break
        if not in_table:
            continue
        if re.match(r"^\d+\. ", line):
            section = line.split(".", 1)[0] + ". "  # also when its own value is not a number
        match = ROW.match(line)
        if not match:
            continue
        label = match["label"].strip()
        if not match["label"][0].isspace():
            parent = label
        elif label.startswith("..."):
            label = f"{section}{label}" if f"{section}{label}" not in found else f"{parent} {label}"
        else:  # "   the same with the attempt log off": a row of its own under the numbered figure
            parent = label = f"{section}{label}"
        found[label] = (float(match["value"].replace(",", "")), match["unit"] or "")
    return found


def run(tree: Path, bench_args: list[str]) -> tuple[dict[str, tuple[float, str]], str]:
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "bench/run.py", *bench_args],
        cwd=ROOT,
        env={**os.environ, "BENCH_TREE": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    tail = [line for line in done.stdout.splitlines() if line.startswith(("correctness:", "FAILED", "code:"))]
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"bench/run.py failed in {tree} (exit {done.returncode})")
    return figures(done.stdout), "; ".join(tail)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the commit to compare with (e.g. HEAD~3, a tag, a hash)")
    parser.add_argument("--new", help="a commit to measure instead of this working tree")
    parser.add_argument("--rounds", type=int, default=2)
    # What follows `--` is bench/run.py's, wherever the options before it stand (argparse alone takes
    # `BASE --new REV -- --quick` for two positionals and refuses it).
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    bench_args = argv[cut + 1 :] or ["--quick"]
    unpacked: list[Path] = []

    def unpack(rev: str) -> Path:
        tree = Path(tempfile.mkdtemp(prefix="gwbench-rev-"))
        unpacked.append(tree)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        return tree

    try:
        trees = {"base": unpack(args.base), "new": unpack(args.new) if args.new else ROOT}
        results: dict[str, list[dict[str, tuple[float, str]]]] = {"base": [], "new": []}
        for round_no in range(args.rounds):
            order = ["base", "new"] if round_no % 2 == 0 else ["new", "base"]
            for name in order:
                sys.stderr.write(f"[compare] round {round_no + 1}/{args.rounds}: {name}\n")
                found, tail = run(trees[name], bench_args)
                results[name].append(found)
                sys.stderr.write(f"[compare]   {tail}\n")
    finally:
        for tree in unpacked:
            shutil.rmtree(tree, ignore_errors=True)
    labels = [label for label in results["new"][0] if all(label in r for r in results["base"] + results["new"])]
    width = max(len(label) for label in labels)
    print(
        f"bench/compare.py: {args.base} (base) and {args.new or 'this tree'} (new), {args.rounds} round(s) of "
        "bench/run.py "
        f"{' '.join(bench_args)}, medians"
    )
    print(f"{'figure':<{width}}  {'base':>12}  {'new':>12}  new/base")
    for label in labels:
        unit = results["new"][0][label][1]
        base = median(r[label][0] for r in results["base"])
        new = median(r[label][0] for r in results["new"])
        ratio = f"{new / base:.2f}" if base else "-"
        print(f"{label:<{width}}  {base:>8g} {unit:<3}  {new:>8g} {unit:<3}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
