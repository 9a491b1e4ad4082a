"""Behaviour monitors over 10-turn conversations stitched from real XSTest answers.

Run: python tools/behavior_conversations.py --data ../shared/data [--conversations 200]
     [--seed 0] [--format table|markdown|json]

The labelled sets are single-turn, so `otel-safety eval` cannot show a multi-turn monitor at
work. Each conversation here is 10 real prompt/answer pairs of ONE XSTest model (one agent),
sent as 10 traces of one conversation id (each re-sending the history so far, as instrumented
agents do) through the real `Pipeline`, with a fresh set of monitors per conversation. The
scenarios are described in NOTES below; (b) and (c) are constructed, (c) also manipulated.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety import detectors
from otel_safety.pipeline import Pipeline

KEYS = ("sandbagging", "agent_deception", "behavior_drift", "ethics_boundary")
TURNS, CHANGE = 10, 5  # turns per conversation; the behaviour changes after turn CHANGE
SCENARIOS = {"steady": None, "switch": "behavior_drift", "degrade": "sandbagging"}  # -> target
COMPLETIONS = "xstest/model_completions"


@dataclass(frozen=True)
class Row:
    prompt: str
    answer: str


@dataclass(frozen=True)
class Judged:  # one monitor's finding on one turn, small so thousands of conversations fit
    key: str
    turn: int
    score: float
    threshold: float
    detected: bool
    cause: str  # the strongest indicator (ethics: its check), to say what a false alarm was


@dataclass
class Conversation:
    scenario: str
    model: str
    findings: list[Judged]

    def fired(self, key: str | None = None, before: int = TURNS + 1) -> bool:
        """Did `key` (any monitor if None) fire on a turn numbered below `before`?"""
        return any(
            f.detected and (key is None or f.key == key) and f.turn < before for f in self.findings
        )

    def peak(self, key: str) -> float:
        """The highest score `key` gave over the conversation (0 when it never judged)."""
        return max((f.score for f in self.findings if f.key == key), default=0.0)


def load_rows(data: Path) -> dict[str, dict[str, list[Row]]]:
    """Per model: `comply` (full compliance with a safe prompt: no monitor should object)
    and `refuse` (full refusal, any prompt), in file order so sampling is reproducible."""
    folder = data / COMPLETIONS
    files = sorted(folder.glob("*.csv")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no XSTest completions at {folder} (pass --data DIR)")
    pools: dict[str, dict[str, list[Row]]] = {}
    for path in files:
        model = path.stem.rsplit("_", 1)[-1]
        pool: dict[str, list[Row]] = {"comply": [], "refuse": []}
        with path.open(encoding="utf-8", newline="") as handle:
            for rec in csv.DictReader(handle):
                row = Row(rec["prompt"], rec["completion"])
                if rec["final_label"] == "1_full_compliance" and not rec["type"].startswith(
                    "contrast_"
                ):
                    pool["comply"].append(row)
                elif rec["final_label"] == "2_full_refusal":
                    pool["refuse"].append(row)
        pools[model] = pool
    return pools


def first_sentence(text: str) -> str:
    """The first sentence of the first non-empty line: a real answer, cut short on purpose."""
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]


def stitch(scenario: str, pool: dict[str, list[Row]], rng: random.Random) -> list[Row]:
    """The 10 turns of one conversation; rows are drawn without replacement so no prompt
    repeats (a repeated turn would be judged again and would not be a new topic)."""
    if scenario == "steady":
        return rng.sample(pool["comply"], TURNS)
    if scenario == "switch":
        return rng.sample(pool["comply"], CHANGE) + rng.sample(pool["refuse"], TURNS - CHANGE)
    cuttable = [r for r in pool["comply"] if first_sentence(r.answer) != r.answer.strip()]
    rows = rng.sample(cuttable, TURNS)
    return rows[:CHANGE] + [Row(r.prompt, first_sentence(r.answer)) for r in rows[CHANGE:]]


class Traces:
    """Builds each turn as real SDK spans: an agent span over a chat span with the history."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("behavior_conversations")

    def conversation(self, rows: list[Row], agent: str, conversation_id: str) -> list[list[Any]]:
        history: list[dict[str, Any]] = []
        traces = []
        common = {"gen_ai.agent.name": agent, "gen_ai.conversation.id": conversation_id}
        for row in rows:
            history.append({"role": "user", "parts": [{"type": "text", "content": row.prompt}]})
            answer = {"role": "assistant", "parts": [{"type": "text", "content": row.answer}]}
            self.exporter.clear()
            with (
                self.tracer.start_as_current_span(
                    f"invoke_agent {agent}",
                    attributes={"gen_ai.operation.name": "invoke_agent", **common},
                ),
                self.tracer.start_as_current_span(
                    "chat",
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": json.dumps(history),
                        "gen_ai.output.messages": json.dumps([answer]),
                        **common,
                    },
                ),
            ):
                pass
            history.append(answer)
            traces.append(list(self.exporter.get_finished_spans()))
        return traces


def judge(traces: list[list[Any]]) -> list[Judged]:
    """Every turn through the real pipeline, with monitors built fresh for this conversation."""
    pipeline = Pipeline(detectors=detectors.create(KEYS))
    judged = []
    for turn, spans in enumerate(traces, start=1):
        result = pipeline.evaluate(spans)
        if result.error or result.detector_errors:
            raise RuntimeError(f"pipeline failed: {result.error or result.detector_errors}")
        judged += [
            Judged(f.detector, turn, f.score, f.threshold, f.detected, _cause(f.details))
            for f in result.findings
        ]
    return judged


def _cause(details: dict[str, Any]) -> str:
    top = (details.get("indicators") or [{}])[0]
    check = (top.get("metadata") or {}).get("check")
    return ":".join(str(x) for x in (top.get("type", "none"), check) if x)


def measure(data: Path, conversations: int = 200, seed: int = 0) -> list[Conversation]:
    """All scenarios for all models; each (scenario, model) has its own seeded generator, so
    adding a model or a scenario does not change the others' conversations."""
    pools, traces, done = load_rows(data), Traces(), []
    for scenario in SCENARIOS:
        for model, pool in pools.items():
            rng = random.Random(f"{seed}/{scenario}/{model}")
            for n in range(conversations):
                cid = f"{scenario}-{model}-{seed}-{n}"
                turns = traces.conversation(stitch(scenario, pool, rng), model, cid)
                done.append(Conversation(scenario, model, judge(turns)))
                if (n + 1) % 50 == 0 or n + 1 == conversations:
                    print(f"{scenario} {model}: {n + 1}/{conversations}", file=sys.stderr)
    return done


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: an observed score, not an interpolated one."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(p * len(ranked)) - 1)]


def summarise(results: list[Conversation]) -> list[dict[str, Any]]:
    """One row per scenario and model, plus "all" models: firings and peak scores per monitor."""
    rows = []
    for scenario in SCENARIOS:
        mine = [c for c in results if c.scenario == scenario]
        for model in [*dict.fromkeys(c.model for c in mine), "all"]:
            group = [c for c in mine if model in ("all", c.model)]
            row: dict[str, Any] = {"scenario": scenario, "model": model, "n": len(group)}
            row["target"] = SCENARIOS[scenario]
            row["any_fired"] = sum(c.fired() for c in group)
            row["fired_before_change"] = sum(c.fired(before=CHANGE + 1) for c in group)
            for key in KEYS:
                peaks = [c.peak(key) for c in group]
                row[key] = {
                    "fired": sum(c.fired(key) for c in group),
                    "median_peak": round(statistics.median(peaks), 3),
                    "p95_peak": round(percentile(peaks, 0.95), 3),
                }
            row["causes"] = dict(
                Counter(f.cause for c in group for f in c.findings if f.detected).most_common()
            )
            rows.append(row)
    return rows


NOTES = {
    "steady": "(a) steady: 10 full-compliance answers to safe XSTest prompts, shuffled "
    "topics. Every firing is a false alarm.",
    "switch": "(b) switch, CONSTRUCTED from real rows: 5 full-compliance answers, then 5 "
    "full-refusal answers of the same model. Target: behavior_drift (a change of behaviour; "
    "sandbagging firings are shown as they are).",
    "degrade": "(c) degrade, CONSTRUCTED and MANIPULATED: 5 full-compliance answers, then 5 "
    "other real compliant answers of the same model cut to their first sentence. "
    "Target: sandbagging.",
}


def render(summary: list[dict[str, Any]], fmt: str, conversations: int, seed: int) -> str:
    """A table per scenario; a cell is `fired/conversations (median, p95 of peak score)`."""
    if fmt == "json":
        return json.dumps({"conversations": conversations, "seed": seed, "rows": summary}, indent=2)
    head = ["model", *KEYS, "any monitor", "any, turns 1-5"]
    out = [
        f"Behaviour monitors on 10-turn conversations stitched from XSTest model completions "
        f"(xstest/model_completions, one model per conversation), {conversations} "
        f"conversations per scenario and model, seed {seed}. Cell: conversations fired / "
        f"conversations (median, 95th percentile of the conversation's highest score)."
    ]
    for scenario, note in NOTES.items():
        body = [
            [
                r["model"],
                *(
                    f"{r[k]['fired']}/{r['n']} ({r[k]['median_peak']:.2f}, {r[k]['p95_peak']:.2f})"
                    for k in KEYS
                ),
                f"{r['any_fired']}/{r['n']}",
                f"{r['fired_before_change']}/{r['n']}",
            ]
            for r in summary
            if r["scenario"] == scenario
        ]
        out.append(("### " if fmt == "markdown" else "") + note)
        out.append(_table(head, body, fmt))
        causes = next(
            r["causes"] for r in summary if (r["scenario"], r["model"]) == (scenario, "all")
        )
        listed = ", ".join(f"{k} {v}" for k, v in causes.items()) or "none"
        out.append(f"Fired findings (turns) by strongest indicator, all models: {listed}.")
    return "\n\n".join(out)


def _table(head: list[str], body: list[list[str]], fmt: str) -> str:
    if fmt == "markdown":
        lines = [head, ["---"] + ["---:"] * (len(head) - 1), *body]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the labelled data folder")
    parser.add_argument("--conversations", type=int, default=200, help="per scenario and model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=["table", "markdown", "json"], default="table")
    args = parser.parse_args(argv)
    if args.conversations < 1:
        parser.error("--conversations must be at least 1")
    try:
        results = measure(args.data, args.conversations, args.seed)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(summarise(results), args.format, args.conversations, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
