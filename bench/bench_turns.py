"""Benchmark: what the per-turn API adds to an agent's step, as a conversation grows.

Run: python bench/bench_turns.py --turns 1 5 20 50
`TurnMonitors().process(turn)` (the four behaviour monitors, as `guard_capability(...,
monitors=...)` calls it after each model response) is timed on every turn of conversations
of the given lengths; it prints the median and 95th percentile per turn, in milliseconds,
and the halt check the guard adds to each tool call. Figures are printed, not asserted;
they depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

# The same conversation `bench_monitors.py` judges as traces, here turn by turn.
from bench_monitors import ANSWERS, QUESTIONS

from otel_safety.behavior import AgentTurn, TurnMonitors
from otel_safety.guard import Directory, Guard
from otel_safety.halts import Halt, HaltRegistry


def per_turn_ms(monitors: TurnMonitors, turns: int, conversation: str) -> list[float]:
    timings = []
    for index in range(turns):
        turn = AgentTurn(
            agent="planner",
            prompt=f"{QUESTIONS[index % len(QUESTIONS)]} (turn {index})",
            text=ANSWERS[index % len(ANSWERS)],
            span_id=None,
        )
        started = time.perf_counter()
        monitors.process(turn, conversation=conversation)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def halt_check_us(calls: int = 2000) -> float:
    """Mean microseconds of the halt lookup every inline guard check makes, in a registry
    holding 10,000 halted conversations."""
    halts = HaltRegistry()
    for index in range(10_000):
        halts.halt(Halt(conversation=f"c{index}", reason="r", source="trace"))
    started = time.perf_counter()
    for index in range(calls):
        halts.get(f"x{index}")
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 5, 20, 50])
    args = parser.parse_args()
    monitors = TurnMonitors(halts=HaltRegistry())
    Guard(Directory())  # compile the guard's data before timing anything
    per_turn_ms(monitors, 3, "warm-up")
    print("| turns | median ms per turn | p95 ms per turn |")
    print("|---:|---:|---:|")
    for turns in args.turns:
        timings = sorted(per_turn_ms(monitors, turns, f"bench-{turns}"))
        p95 = timings[min(len(timings) - 1, int(0.95 * len(timings)))]
        print(f"| {turns} | {statistics.median(timings):.2f} | {p95:.2f} |")
    print(f"\nhalt lookup per guard check: {halt_check_us():.2f} µs (registry of 10,000 halts)")


if __name__ == "__main__":
    main()
