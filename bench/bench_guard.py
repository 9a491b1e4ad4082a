"""Benchmark: what one inline `guard.check_tool_call` costs the agent.

Every call of the labelled set (shell, file, HTTP, SQL, messaging; block and allow rows) is
checked repeatedly with its requester, on a warm guard (its data compiled at start-up, as in
an app). Loop tracking is on, each row in its own conversation.

Run: make bench   (or: python bench/bench_guard.py --rounds 20)
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

from otel_safety.evaluation.guard_bench import (
    PRINCIPALS_NAME,
    case_files,
    packaged_set,
    read_cases,
)
from otel_safety.guard import Directory, Guard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="passes over the set (default 10)")
    args = parser.parse_args()

    directory = packaged_set()
    cases = [case for path in case_files(directory) for case in read_cases(path)]
    started = time.perf_counter()
    guard = Guard(Directory.load(directory / PRINCIPALS_NAME))
    startup = time.perf_counter() - started

    timings: dict[str, list[float]] = {"all": [], "block": [], "allow": [], "long": []}
    for round_number in range(args.rounds):
        for number, case in enumerate(cases):
            elapsed = _check(guard, case, f"{round_number}:{number}")
            timings["all"].append(elapsed)
            timings[case["expect"]].append(elapsed)
        # The same calls made in one conversation, as a long agent session makes them: its
        # call history (loops, rapid fire) fills up to the guard's bound.
        for case in cases:
            timings["long"].append(_check(guard, case, f"long:{round_number}"))

    print(f"guard start-up (data compiled, principals loaded): {startup * 1000:.1f} ms")
    print(f"{len(cases)} labelled calls x {args.rounds} rounds, each call its own conversation")
    print("(long: the same calls again, all in one conversation per round)\n")
    print(f"{'calls':<8}{'n':>7}{'median µs':>12}{'p95 µs':>10}{'p99 µs':>10}{'max µs':>10}")
    for name, values in timings.items():
        ordered = sorted(values)
        print(
            f"{name:<8}{len(values):>7}{statistics.median(ordered) * 1e6:>12.0f}"
            f"{ordered[int(len(ordered) * 0.95)] * 1e6:>10.0f}"
            f"{ordered[int(len(ordered) * 0.99)] * 1e6:>10.0f}{ordered[-1] * 1e6:>10.0f}"
        )


def _check(guard: Guard, case: dict, conversation: str) -> float:
    begin = time.perf_counter()
    guard.check_tool_call(
        case["tool"],
        case.get("arguments"),
        case.get("requester"),
        conversation=conversation,
        record=False,
    )
    return time.perf_counter() - begin


if __name__ == "__main__":
    main()
