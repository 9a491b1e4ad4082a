"""Instructions the detectors spend judging AgentDojo traces (or, with `--guard`, the inline
guard spends checking its labelled calls), counted by valgrind: a cost figure that does not
move with the machine's load, for comparing two checkouts.

CPU time on a shared or virtual machine varies from one run to the next by more than most
changes to the detectors save, so timing cannot tell them apart. Valgrind's
cachegrind counts the instructions a process executes, the same on every run of the same
code and input. Each checkout is run twice under it, judging the traces once with the pass
that is measured and once without it (everything else, imports and a warm-up pass that
compiles the patterns, is alike); the difference is the judging's cost.

Run: python tools/count_instructions.py --data ../shared/data [--traces 60] [--tree OTHER]
     python tools/count_instructions.py --guard [--tree OTHER]
(needs valgrind: `apt-get install valgrind`; a 60-trace pass takes about a minute per run).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The child: a warm-up pass over the traces, then (when asked) the measured pass over the
# same traces written anew (new trace ids: the monitors keep what they learnt of a trace),
# with the content memo cleared, as bench/bench_detection.py measures throughput.
CHILD = """
import sys
tree, bench, data, count, judge = sys.argv[1:]
sys.path[:0] = [tree, bench]
from pathlib import Path
import otel_safety
assert otel_safety.__file__.startswith(tree), otel_safety.__file__
from bench_detection import agentdojo_traces
from otel_safety.analysis import memo
from otel_safety.pipeline import Pipeline
pipeline = Pipeline()
pipeline.warm()
for spans in agentdojo_traces(Path(data), int(count)):
    pipeline.evaluate(spans)
memo.set_capacity(memo.DEFAULT_CAPACITY)
traces = agentdojo_traces(Path(data), int(count))
if judge == "yes":
    for spans in traces:
        pipeline.evaluate(spans)
print("spans", sum(len(spans) for spans in traces))
"""
# The guard's child: every labelled call of the packaged set checked once to warm up (its
# patterns compiled), then (when asked) once more, each call in a conversation of its own,
# the content memo emptied first: no call is met again, only what calls share (tool names).
GUARD_CHILD = """
import sys
tree, judge = sys.argv[1:]
sys.path[:0] = [tree]
import otel_safety
assert otel_safety.__file__.startswith(tree), otel_safety.__file__
from otel_safety.evaluation.guard_bench import PRINCIPALS_NAME, case_files, packaged_set, read_cases
from otel_safety.analysis import memo
from otel_safety.guard import Directory, Guard
directory = packaged_set()
cases = [case for path in case_files(directory) for case in read_cases(path)]
guard = Guard(Directory.load(directory / PRINCIPALS_NAME))
rounds = ("warm", "measured") if judge == "yes" else ("warm",)
for name in rounds:
    memo.set_capacity(memo.DEFAULT_CAPACITY)  # each call seen anew; names repeat within
    for number, case in enumerate(cases):
        guard.check_tool_call(
            case["tool"], case.get("arguments"), case.get("requester"),
            conversation=f"{name}:{number}", record=False,
        )
print("spans", len(cases))
"""
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(tree: Path, data: Path, traces: int, judge: bool) -> tuple[int, int]:
    """(instructions executed, spans judged) of one detection child under cachegrind."""
    arguments = [str(tree), str(ROOT / "bench"), str(data), str(traces)]
    return _counted(tree, CHILD, [*arguments, "yes" if judge else "no"])


def guard_instructions(tree: Path, judge: bool) -> tuple[int, int]:
    """(instructions executed, calls checked) of one guard child under cachegrind."""
    return _counted(tree, GUARD_CHILD, [str(tree), "yes" if judge else "no"])


def _counted(tree: Path, child: str, arguments: list[str]) -> tuple[int, int]:
    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-c",
            child,
            *arguments,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = _REFS.search(done.stderr)
    spans = re.search(r"spans (\d+)", done.stdout)
    if done.returncode != 0 or found is None or spans is None:
        raise SystemExit(f"the run in {tree} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", "")), int(spans.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--traces", type=int, default=60, help="AgentDojo traces (default 60)")
    parser.add_argument(
        "--guard",
        action="store_true",
        help="count the inline guard checking its packaged labelled calls instead (no --data)",
    )
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="a checkout to count (repeatable; default: this one), e.g. a `git worktree` of "
        "the revision to compare with",
    )
    args = parser.parse_args()
    if args.traces < 1:
        parser.error(f"--traces must be at least 1, not {args.traces}")
    if not args.guard and not (args.data / "agentdojo").is_dir():
        parser.error(f"no agentdojo/ folder in {args.data}: pass --data /path/to/shared/data")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed: apt-get install valgrind")
    if args.guard:
        print("| checkout | labelled calls | instructions checking them | per call |")
        print("|---|---:|---:|---:|")
        for tree in args.tree or [ROOT]:
            tree = tree.resolve()
            with_pass, calls = guard_instructions(tree, True)
            without, _ = guard_instructions(tree, False)
            spent = with_pass - without
            print(f"| {tree} | {calls} | {spent:,} | {spent // calls:,} |")
        return 0
    print("| checkout | traces | spans | instructions judging them | per span |")
    print("|---|---:|---:|---:|---:|")
    for tree in args.tree or [ROOT]:
        tree = tree.resolve()
        with_pass, spans = instructions(tree, args.data, args.traces, True)
        without, _ = instructions(tree, args.data, args.traces, False)
        spent = with_pass - without
        print(f"| {tree} | {args.traces} | {spans} | {spent:,} | {spent // spans:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
