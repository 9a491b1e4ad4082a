"""Whole agent runs replayed through real instrumentation, judged against their GenAI spans.

Each run is written as GenAI `chat` and `execute_tool` spans (`SpanWriter`, as `eval` writes
it) and replayed through the OpenAI-client instrumentations (opentelemetry-instrumentation-
openai-v2, OpenInference, OpenLLMetry; `:stream` streams every answer; `otel_genai:events`
sends content as log records only) against a local fake server, and, where pydantic-ai can
say the run, as a pydantic-ai agent. The tool prints, per instrumentation, how many runs
reach another escalation level, and which. A run that ends on a tool's result is counted
apart: no model call carried that result, so no client instrumentation's span holds it.

Run (needs the test extras: the replay and the fake server live in `tests/`):
    python tools/dialect_parity.py --data ../shared/data --agentdojo 1200 --sets set1,set2,set4
The sets of our agent runs kept blind (`datasets.NEVER_READ`) are refused here.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from replay_instrumented import (
    EVENTS,
    STREAM,
    replay_pydantic_ai,
    replay_with_events,
    sayable_by_pydantic_ai,
)

from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.evaluation.datasets import NEVER_READ, agentdojo
from otel_safety.pipeline import Pipeline

CLIENTS = ["otel_genai", "openinference", "openllmetry"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="the shared data folder (for --agentdojo)")
    parser.add_argument("--agentdojo", type=int, default=0, help="AgentDojo runs to replay")
    parser.add_argument("--sets", default="set1", help="our agent-run sets, comma-separated")
    parser.add_argument(
        "--instrumentations",
        default=",".join(CLIENTS + [c + STREAM for c in CLIENTS] + [EVENTS, "pydantic_ai"]),
        help="which to replay through (default: all)",
    )
    args = parser.parse_args()
    sets = [name for name in args.sets.split(",") if name]
    if NEVER_READ & set(sets):
        blind = ", ".join(sorted(NEVER_READ & set(sets)))
        parser.error(f"{blind} stay blind: not replayed here")
    if args.agentdojo and args.data is None:
        parser.error("--agentdojo needs --data")
    cases = [case for name in sets for case in _our_runs(name)]
    if args.agentdojo:
        found = list(agentdojo(args.data))
        random.Random(0).shuffle(found)
        cases += found[: args.agentdojo]
    print(f"{len(cases)} runs; writing each as GenAI spans...", file=sys.stderr)
    pipeline, writer = Pipeline(), SpanWriter()
    written = {case.case_id: pipeline.evaluate(writer.spans(case)).level for case in cases}
    runs = [_run(case) for case in cases]
    ends_on_a_result = {run["id"] for run in runs if run["messages"][-1]["role"] == "tool"}
    for instrumentation in args.instrumentations.split(","):
        print(f"replaying through {instrumentation}...", file=sys.stderr)
        if instrumentation == "pydantic_ai":
            sayable = [run for run in runs if sayable_by_pydantic_ai(run)]
            traces = {key: (spans, []) for key, spans in replay_pydantic_ai(sayable).items()}
        else:
            traces = replay_with_events(instrumentation, runs)
        pipeline = Pipeline()
        differ = []
        for run_id, (spans, events) in traces.items():
            level = pipeline.evaluate(spans, "root_ended", events).level
            if level != written[run_id]:
                differ.append((run_id, written[run_id].name, level.name))
        apart = [d for d in differ if d[0] in ends_on_a_result]
        rest = [d for d in differ if d[0] not in ends_on_a_result]
        print(
            f"{instrumentation}: {len(rest)} of {len(traces)} runs reach another level"
            f" ({len(apart)} more end on a tool's result)"
        )
        for run_id, before, after in rest:
            print(f"  {run_id}: {before} written, {after} replayed")


def _our_runs(name: str) -> list[Case]:
    folder = resources.files("otel_safety.evaluation") / "agent_runs"
    rows = [json.loads(line) for line in (folder / f"{name}.jsonl").read_text().splitlines()]
    cases = []
    for row in rows:
        system = "\n".join(m["content"] for m in row["messages"] if m["role"] == "system")
        rest = [m for m in row["messages"] if m["role"] != "system"]
        cases.append(Case(row["id"], name, rest, {}, system=system))
    return cases


def _run(case: Case) -> dict[str, Any]:
    system = [{"role": "system", "content": case.system}] if case.system else []
    return {"id": case.case_id, "messages": system + list(case.messages)}


if __name__ == "__main__":
    main()
