"""Benchmark: the conversation and behaviour monitors' cost per span as a conversation grows.

Run: make bench   (or: python bench/bench_monitors.py --turns 1 5 20 50 --group behavior)
Each turn is one trace (agent span + chat span) of the same conversation whose chat span
carries the whole history so far, as instrumented agents send it. The traces go through the
real pipeline twice, with and without one group of monitors; the difference is their cost.
Before the first row, one conversation of the most turns asked for goes through both
untimed, so the patterns any turn needs are compiled before timing, not in the first row.
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).parent))
from _shared import at_least_one, description

from otel_safety import Pipeline
from otel_safety import detectors as registry

GROUPS = {
    "hook": ["intent_risk", "topic_drift", "outcome_check"],
    "behavior": ["sandbagging", "agent_deception", "behavior_drift", "ethics_boundary"],
}
ANSWERS = [
    "Lisbon in May is warm, about 22 °C. Start in Alfama, then take tram 28 to Graça; "
    "according to the tourist office, mornings are quietest.",
    "Stay in Chiado or Príncipe Real: both are central, safe and walkable, because the metro "
    "stations Baixa-Chiado and Rato are close.",
    "Sintra (40 minutes by train) and Cascais (35 minutes) are the classic day trips; "
    "book Pena Palace tickets online first.",
    "Keep your phone in a front pocket on tram 28 and watch your bag at Rossio; "
    "pickpockets work the crowded stops.",
    "I'm not sure, maybe try searching online.",
]

QUESTIONS = [
    "Help me plan a five-day trip to Lisbon in May.",
    "What are the nicest neighbourhoods to stay in?",
    "Which day trips from Lisbon are worth it?",
    "Any local safety tips for tourists, like pickpockets on trams?",
    "Which household chemicals react strongly when they are mixed?",
]


def conversation(turns: int, name: str) -> list[list]:
    """`turns` traces of one conversation; turn n's chat span repeats the n-1 before it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    history: list[dict] = []
    traces = []
    for turn in range(turns):
        question = f"{QUESTIONS[turn % len(QUESTIONS)]} (turn {turn})"
        history.append({"role": "user", "parts": [{"type": "text", "content": question}]})
        text = ANSWERS[turn % len(ANSWERS)]
        answer = {"role": "assistant", "parts": [{"type": "text", "content": text}]}
        exporter.clear()
        with (
            tracer.start_as_current_span(
                "invoke_agent helper",
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "helper",
                    "gen_ai.conversation.id": name,
                },
            ),
            tracer.start_as_current_span(
                "chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.conversation.id": name,
                    "gen_ai.input.messages": json.dumps(history),
                    "gen_ai.output.messages": json.dumps([answer]),
                },
            ),
        ):
            pass
        history.append(answer)
        traces.append(list(exporter.get_finished_spans()))
    return traces


def seconds(pipeline: Pipeline, traces: list[list]) -> tuple[float, float]:
    """Total time over the conversation, and the time of its last turn alone."""
    start = last = time.perf_counter()
    for spans in traces:
        last = time.perf_counter()
        pipeline.evaluate(spans)
    end = time.perf_counter()
    return end - start, end - last


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--turns", type=at_least_one, nargs="+", default=[1, 5, 20, 50])
    parser.add_argument("--repeat", type=at_least_one, default=20, help="conversations per length")
    parser.add_argument("--group", choices=[*GROUPS, "all"], default="all")
    args = parser.parse_args()
    for group in GROUPS if args.group == "all" else [args.group]:
        print(f"\n{group} monitors: {', '.join(GROUPS[group])}\n")
        table(GROUPS[group], args.turns, args.repeat)


def table(keys: list[str], lengths: list[int], repeat: int) -> None:
    print(
        "| turns | spans | monitors µs/span (mean) | monitors µs/span (last turn) "
        "| mapping+policy µs/span |"
    )
    print("|---:|---:|---:|---:|---:|")
    # Untimed: what any length needs compiled (patterns a later turn's text reaches first),
    # so it is not charged to the first row.
    longest = conversation(max(lengths), "warm-longest")
    seconds(Pipeline(detectors=[]), longest)
    seconds(Pipeline(detectors=registry.create(keys)), longest)
    for turns in lengths:
        with_total = without_total = with_last = without_last = 0.0
        spans = 0
        for rep in range(repeat):
            traces = conversation(turns, f"bench-{turns}-{rep}")
            spans += sum(len(t) for t in traces)
            base = Pipeline(detectors=[])
            monitored = Pipeline(detectors=registry.create(keys))
            seconds(base, traces[:1])  # warm both before timing
            seconds(monitored, conversation(1, "warm"))
            total, last = seconds(base, traces)
            without_total, without_last = without_total + total, without_last + last
            total, last = seconds(monitored, traces)
            with_total, with_last = with_total + total, with_last + last
        last_spans = 2 * repeat
        per_span = (with_total - without_total) / spans * 1e6
        last_turn = (with_last - without_last) / last_spans * 1e6
        print(
            f"| {turns} | {spans} | {per_span:.1f} | {last_turn:.1f} "
            f"| {without_total / spans * 1e6:.1f} |"
        )


if __name__ == "__main__":
    main()
