"""Regenerate the README's speed table from real runs of the benchmarks.

Run: make readme-bench   (or: python tools/readme_bench.py --data ../shared/data
[--only bench_worst_case.py,...] to run some again and keep the others' sections)
Each benchmark prints its figures beside an anchor measured in the same run; this writes
their markdown output, with the machine it ran on, between `<!-- bench:start -->` and
`<!-- bench:end -->`. Speed depends on the machine, so unlike the eval block no test
compares it with a fresh run.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# A section's first line: the command that made it, in backticks.
_HEADING = re.compile(r"^`(python bench/[^`\n]+)`$", re.MULTILINE)

# (the command as shown in the README, the script and its arguments)
BENCHES = [
    (
        "python bench/bench_detection.py --data ../shared/data --format markdown",
        ["bench/bench_detection.py", "--data", "{data}", "--format", "markdown"],
    ),
    (
        "python bench/bench_app_overhead.py --format markdown",
        ["bench/bench_app_overhead.py", "--format", "markdown"],
    ),
    (
        "python bench/bench_app_overhead.py --apps 2 --rows process,same_priority "
        "--format markdown",
        [
            "bench/bench_app_overhead.py",
            "--apps",
            "2",
            "--rows",
            "process,same_priority",
            "--format",
            "markdown",
        ],
    ),
    (
        "python bench/bench_app_start.py --format markdown",
        ["bench/bench_app_start.py", "--format", "markdown"],
    ),
    (
        "python bench/bench_hot_path.py --format markdown",
        ["bench/bench_hot_path.py", "--format", "markdown"],
    ),
    (
        "python bench/bench_guard.py --format markdown",
        ["bench/bench_guard.py", "--format", "markdown"],
    ),
    (
        "python bench/bench_ingest.py --data ../shared/data",
        ["bench/bench_ingest.py", "--data", "{data}"],
    ),
    (
        "python bench/bench_store.py --data ../shared/data --grow 1,100 --writes-of 30 "
        "--format markdown",
        [
            "bench/bench_store.py",
            "--data",
            "{data}",
            "--grow",
            "1,100",
            "--writes-of",
            "30",
            "--format",
            "markdown",
        ],
    ),
    (
        "python bench/bench_worst_case.py --sizes 1000000 --format markdown",
        ["bench/bench_worst_case.py", "--sizes", "1000000", "--format", "markdown"],
    ),
]


def run(arguments: list[str], data: str) -> str:
    """The benchmark's markdown; a benchmark that fails ends this run (SystemExit, no
    traceback) with what it said on stderr and stdout, and the README is left as it was."""
    filled = [a.format(data=data) for a in arguments]
    done = subprocess.run([sys.executable, *filled], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        said = [f"{' '.join(filled)} failed (exit {done.returncode}); README left as it was"]
        for name, text in (("stderr", done.stderr), ("stdout", done.stdout)):
            if text.strip():
                said.append(f"--- its {name} ---\n{text.rstrip()}")
        raise SystemExit("\n".join(said))
    return done.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default="../shared/data",
        help="the labelled data folder (relative to the current folder; the benchmarks run "
        "from the repository's root)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated benchmark scripts to run again (e.g. bench_worst_case.py); "
        "the other sections of the table are kept as they are",
    )
    args = parser.parse_args()
    data = str(Path(args.data).resolve())  # the benchmarks run with cwd=ROOT
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    known = {Path(arguments[0]).name for _, arguments in BENCHES}
    if only - known:
        raise SystemExit(f"unknown benchmark(s) {sorted(only - known)}; pick from {sorted(known)}")
    machine = f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"
    text = README.read_text(encoding="utf-8")
    start, end = "<!-- bench:start -->", "<!-- bench:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"README has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    old_block, tail = rest.split(end, 1)
    kept = _sections(old_block) if only else {}
    parts = []
    for command, arguments in BENCHES:
        if only and Path(arguments[0]).name not in only:
            if command not in kept:
                raise SystemExit(f"README has no section for `{command}` to keep; run them all")
            parts.append(kept[command])
            continue
        print(f"running {command}", file=sys.stderr)
        parts.append(f"`{command}`\n\n{run(arguments, data)}")
    block = (
        f"<!-- generated by `make readme-bench` on {machine}; do not edit by hand -->\n"
        + "\n\n".join(parts)
    )
    README.write_text(f"{head}{start}\n{block}\n{end}{tail}", encoding="utf-8")
    print("README speed table regenerated", file=sys.stderr)
    return 0


def _sections(block: str) -> dict[str, str]:
    """The block's section per benchmark command, each from its "`command`" line to the
    next such line (the order is BENCHES'). A section whose command BENCHES no longer runs
    (its arguments changed) is left out, not kept inside the section before it."""
    found = [(heading.start(), heading.group(1)) for heading in _HEADING.finditer(block)]
    known = {command for command, _ in BENCHES}
    sections = {}
    for number, (at, command) in enumerate(found):
        stop = found[number + 1][0] if number + 1 < len(found) else len(block)
        if command in known:
            sections[command] = block[at:stop].strip()
    return sections


if __name__ == "__main__":
    sys.exit(main())
