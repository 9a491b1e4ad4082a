"""Benchmark: what the deep analysis tier costs the engine's thread per exported trace.

The engine hands every exported batch to `DeepTier.offer`, which only picks candidates and
queues them; the model is asked on the tier's own threads. Three cases, on real judged
agent runs (AgentDojo-shaped cases through the pipeline): no trace is a candidate (the
selection alone), every trace is a candidate refused by the per-minute budget, and every
trace is a candidate queued. The endpoint is a closed local port, so the tier's threads
fail fast; only `offer` is timed. With the tier off (the default) the engine does not
even call it.

Run: python bench/bench_deep_offer.py --traces 2000
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter

from otel_safety.bootstrap import build_pipeline
from otel_safety.config import Settings
from otel_safety.deep.settings import deep_config
from otel_safety.deep.tier import DeepTier
from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.pipeline import TraceEvaluation

ALL_LEVELS = ["NONE", "CLARIFY", "WARN", "SOFT_STOP", "HUMAN_REVIEW", "HARD_STOP"]


def _case(number: int) -> Case:
    call = {"name": "read_file", "arguments": json.dumps({"path": f"notes/{number}.md"})}
    return Case(
        case_id=f"bench:{number}",
        dataset="bench",
        messages=[
            {"role": "user", "content": f"Summarise note {number}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "A short note. " * 40},
            {"role": "assistant", "content": f"Note {number} is short."},
        ],
        labels={},
    )


def _evaluations(count: int) -> list[TraceEvaluation]:
    pipeline = build_pipeline(Settings.resolve(environ={}))
    writer = SpanWriter()
    try:
        return [pipeline.evaluate(writer.spans(_case(n))) for n in range(count)]
    finally:
        writer.shutdown()


def _time_offer(evaluations: list[TraceEvaluation], **deep: object) -> tuple[float, Counter]:
    settings = Settings.resolve(
        environ={},
        deep=True,
        deep_model="bench",
        deep_base_url="http://127.0.0.1:9/v1",
        deep_retries=0,
        deep_concurrency=1,
        **deep,
    )
    config = deep_config(settings, environ={})
    assert config is not None
    tier = DeepTier(settings, config, [], build_pipeline(settings).policy)
    started = time.perf_counter()
    for evaluation in evaluations:
        tier.offer([evaluation])
    seconds = time.perf_counter() - started
    tier.shutdown(timeout_millis=30_000)
    return seconds, tier.stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=2000)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the closed port's failures are expected here
    evaluations = _evaluations(args.traces)
    cases = {
        "no candidate": {"deep_levels": ["HARD_STOP"], "deep_uncertainty": 0.0},
        "candidates over the budget": {"deep_levels": ALL_LEVELS, "deep_per_minute": 1},
        "candidates queued": {
            "deep_levels": ALL_LEVELS,
            "deep_per_minute": 0,
            "deep_queue_size": args.traces,
        },
    }
    print(f"DeepTier.offer on {args.traces} judged agent runs, one call per trace:")
    for name, options in cases.items():
        seconds, stats = _time_offer(evaluations, **options)
        per = 1e6 * seconds / args.traces
        print(
            f"  {name:28} {per:8.1f} us per trace "
            f"(candidates {stats['deep_candidates']}, queued {stats['deep_queued']})"
        )


if __name__ == "__main__":
    main()
