"""Benchmark: masking secrets in judged traces before they are stored or forwarded.

`serve` redacts by default (`redact_secrets`): every string attribute of every span and span
event, and every string of the trajectory, is searched for secrets after judging. AgentDojo
runs from `../shared/data` are judged once (not timed), then redacted as the engine does
(`redact_evaluation`, on fresh copies, `--repeats` times, the fastest kept). The anchor,
in the same run, is one plain regex (`\bpassword\b`, ignoring case) finding every match in
each of the same strings (`findall`), so it reads each whole: the least a pass that reads
each of them must spend. Then one agent run of 200 and of 1,000 tool calls whose chat spans
each resend the whole history, as SDKs send it: its input grows with the square of the run,
and so would masking each history whole.

Run: python bench/bench_redaction.py --data ../shared/data [--traces 300] [--repeats 3]
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

import regex

sys.path.insert(0, str(Path(__file__).parent))
from _shared import at_least_one, description, require_data
from bench_detection import agentdojo_traces, run_spans, spread, tool_texts

from otel_safety import Pipeline
from otel_safety.redaction import redact_evaluation

_ANCHOR = regex.compile(r"\bpassword\b", regex.IGNORECASE)


def strings(value: Any) -> list[str]:
    """Every string in a span attribute value or a dumped trajectory."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in strings(item)]
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument(
        "--traces", type=at_least_one, default=300, help="AgentDojo runs (default 300)"
    )
    parser.add_argument(
        "--repeats", type=at_least_one, default=3, help="passes (the fastest is kept)"
    )
    args = parser.parse_args()
    require_data(parser, args.data)

    pipeline = Pipeline()
    evaluations = [pipeline.evaluate(spans) for spans in agentdojo_traces(args.data, args.traces)]
    span_count = sum(len(evaluation.spans) for evaluation in evaluations)
    texts = [
        text
        for evaluation in evaluations
        for span in evaluation.spans
        for text in strings(dict(span.attributes or {}))
        + [t for event in span.events for t in strings(dict(event.attributes or {}))]
    ]
    texts += [
        text
        for evaluation in evaluations
        if evaluation.trajectory is not None
        for text in strings(evaluation.trajectory.model_dump())
    ]

    redact, anchor, masked = _timed(evaluations, texts, args.repeats)

    print(
        f"{len(evaluations)} AgentDojo runs, {span_count:,} spans, {len(texts):,} strings, "
        f"{masked} secrets masked\n"
    )
    print("| pass | CPU per span | vs anchor |")
    print("|---|---|---|")
    print(
        f"| anchor: one regex, every match, over every string | "
        f"{anchor / span_count * 1e6:.1f} µs | 1.0 |"
    )
    print(f"| `redact_evaluation` | {redact / span_count * 1e6:.1f} µs | {redact / anchor:.1f}x |")
    pool = tool_texts(args.data, 1000)
    print("\n| one run, histories resent | characters | `redact_evaluation` | anchor | vs anchor |")
    print("|---|---|---|---|---|")
    for size in (200, 1000):
        evaluation = pipeline.evaluate(run_spans(spread(pool, size), repeat_history=True))
        strings_of_run = [t for span in evaluation.spans for t in strings(dict(span.attributes))]
        redact, anchor, _ = _timed([evaluation], strings_of_run, args.repeats)
        print(
            f"| {size} tool calls | {sum(map(len, strings_of_run)):,} | {redact:.3f} s | "
            f"{anchor:.3f} s | {redact / anchor:.1f}x |"
        )


def _timed(evaluations: list[Any], texts: list[str], repeats: int) -> tuple[float, float, int]:
    """CPU seconds to redact fresh copies of `evaluations`, and to run the anchor over
    `texts` (fastest of `repeats`), and how many secrets were masked."""
    redact, anchor, masked = float("inf"), float("inf"), 0
    for _ in range(repeats):
        copies = [copy.copy(evaluation) for evaluation in evaluations]
        started = time.process_time()
        masked = sum(redact_evaluation(evaluation) for evaluation in copies)
        redact = min(redact, time.process_time() - started)
        started = time.process_time()
        for text in texts:
            _ANCHOR.findall(text)  # every match: a search would stop at the first
        anchor = min(anchor, time.process_time() - started)
    return redact, anchor, masked


if __name__ == "__main__":
    main()
