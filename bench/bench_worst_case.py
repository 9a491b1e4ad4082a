"""Benchmark: hostile input against every detector pattern and the whole pipeline.

1. Every pattern the detectors and the guard compile, as they search it (RE2 for ASCII text
   where it runs the pattern alike, see `otel_safety/analysis/linear.py`), is searched in runs
   of each character it names (and of a few that hostile input favours: backslashes,
   backticks, quotes, spaces, letters) at two sizes: n characters, and 4n where the search of
   n took 2 ms or more (a faster one is too short to time; how many patterns were timed at
   4n and how many were not is printed); a pattern whose time grows faster than its input
   is listed with its growth and engine.
2. A message, a tool argument and a tool result of 10 KB, 100 KB and 1 MB of such runs go
   through the whole pipeline (`Pipeline.evaluate`), each timed against the anchor: one plain
   regex search of the same input for a character it does not hold (NUL), which finds no
   match and so reads the whole input; so do runs set inside a sentence that reaches the
   claim patterns (a long token where an amount or a file name would stand), whose search
   once tried every position of the run.

Run: make bench   (or: python bench/bench_worst_case.py --sizes 10000,100000,1000000)
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

import regex
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

HOSTILE = ("\\", "`", '"', "'", " ", "a", "<", ".", "\n", "0", "-", "/", "*", "ignore ")
_LITERAL = regex.compile(r"(?<!\\)[A-Za-z0-9<>`'\"/.*_-]")
# The anchor: a search that reads the whole input, as no input holds a NUL (checked).
_ANCHOR = regex.compile("\x00")
# A search of n characters faster than this is not timed at 4n: too short to time.
TIMED_FROM = 0.002
# What the pipeline is fed: runs of a character, alone or inside a sentence that reaches the
# claim patterns (a long token where an amount or a file name would stand), the token kept
# short enough for the sentence to be read whole (claims are looked for in an answer's first
# 20,000 characters: past that, the cut would hide the claim); and line breaks inside a
# request, where a text of breaks alone would be stripped to nothing.
_CLAIM_RUN = 16_000
_PIPELINE_INPUTS = (
    *((character, "{run}") for character in ("\\", "`", '"', "a", " ", "ignore ")),
    # Words the injection rules' reader undoes as disguises: spaced, dotted, leet, mixed script.
    *((run, "{run}") for run in ("a ", "a.", "a1b ", "x\u0430 ")),
    ("2", "I transferred {run} USD and the payment has been sent."),
    ("i", "I updated the file {run} and it has been saved."),
    ("\n", "Run the tests.{run}Thanks."),
)


class _Timeout(BaseException):  # detectors catch Exception: this must get past them
    pass


def _alarm(_signal: int, _frame: Any) -> None:
    raise _Timeout


def collected_patterns() -> dict[tuple[str, int], Any]:
    """Every pattern compiled while the detectors and the guard are built, as the detectors
    search it: a `linear.LinearPattern` (RE2 for ASCII text) where one was made."""
    from otel_safety.analysis import linear

    found: dict[tuple[str, int], Any] = {}
    wrapped: dict[tuple[str, int], Any] = {}
    original = regex.compile
    original_linear, original_on_use = linear.compile, linear.compile_on_use

    def recording(pattern: Any, flags: int = 0, *args: Any, **kwargs: Any) -> regex.Pattern:
        compiled = original(pattern, flags, *args, **kwargs)
        if isinstance(pattern, str):
            found[(pattern, flags)] = compiled
        return compiled

    def recording_linear(pattern: str, flags: int = 0) -> Any:
        compiled = original_linear(pattern, flags)
        wrapped[(pattern, flags)] = compiled
        return compiled

    def recording_on_use(pattern: str, flags: int = 0, where: str = "pattern") -> Any:
        compiled = original_on_use(pattern, flags, where)
        wrapped[(pattern, flags)] = compiled
        return compiled

    regex.compile = recording
    linear.compile = recording_linear
    linear.compile_on_use = recording_on_use
    try:
        from otel_safety import detectors

        detectors.create()
    finally:
        regex.compile = original
        linear.compile = original_linear
        linear.compile_on_use = original_on_use
    linear.compile_pending()  # packaged patterns wait for their first search: not timed here
    return found | wrapped


def timed(function: Any, limit: float) -> float:
    """Seconds `function` took, or `limit` when it was stopped there."""
    signal.setitimer(signal.ITIMER_REAL, limit)
    started = time.perf_counter()
    try:
        function()
    except _Timeout:
        return limit
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return time.perf_counter() - started


def _engine(source: str, pattern: Any) -> str:
    """Which engine searches ASCII text with `pattern`, and why not RE2."""
    from otel_safety.analysis.linear import on_re2
    from otel_safety.analysis.re2_syntax import untranslatable

    if on_re2(pattern):
        return "RE2"
    return f"regex ({untranslatable(source, pattern.flags) or 'compiled outside the data files'})"


def pattern_sweep(small: int, limit: float) -> dict[str, Any]:
    """Patterns whose search time grows more than linearly from `small` to 4x `small`
    (`superlinear`), among the `patterns` searched: `timed_at_4n` of them took `TIMED_FROM`
    or more on some run of `small` characters and were timed at 4x; the others were not."""
    rows = []
    patterns = collected_patterns()
    timed_at_4n = 0
    for (source, _), pattern in patterns.items():
        characters = set(HOSTILE) | set(_LITERAL.findall(source))
        worst: dict[str, Any] | None = None
        grown = False
        for character in characters:
            unit = small // len(character)
            short = timed(lambda c=character, u=unit, p=pattern: p.search(c * u), limit)
            if short < TIMED_FROM:
                continue
            grown = True
            long = timed(lambda c=character, u=unit, p=pattern: p.search(c * u * 4), limit)
            growth = long / short
            if growth > 6 and (worst is None or long > worst["seconds_4x"]):
                worst = {
                    "pattern": source[:100],
                    "engine": _engine(source, pattern),
                    "character": character,
                    "seconds": round(short, 4),
                    "seconds_4x": round(long, 4),
                    "growth_4x": round(growth, 1),
                }
        timed_at_4n += grown
        if worst:
            rows.append(worst)
    return {
        "superlinear": sorted(rows, key=lambda r: -r["seconds_4x"]),
        "patterns": len(patterns),
        "timed_at_4n": timed_at_4n,
        "not_timed_at_4n": len(patterns) - timed_at_4n,
        "timed_from_ms": TIMED_FROM * 1000,
        "n": small,
    }


def run_spans(
    message: str | None = None, argument: str | None = None, result: str | None = None
) -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    user = [{"role": "user", "parts": [{"type": "text", "content": message or "List files"}]}]
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": message or "Done."}]}]
    with tracer.start_as_current_span(
        "invoke_agent bench",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
    ):
        with tracer.start_as_current_span(
            "chat",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(user),
                "gen_ai.output.messages": json.dumps(answer),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool run_shell",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "run_shell",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.arguments": json.dumps({"command": argument or "ls"}),
                "gen_ai.tool.call.result": result or "ok",
            },
        ):
            pass
    provider.shutdown()
    spans: list[ReadableSpan] = list(exporter.get_finished_spans())
    return spans


def pipeline_sweep(sizes: list[int], limit: float) -> list[dict[str, Any]]:
    from otel_safety.analysis import linear, memo
    from otel_safety.pipeline import Pipeline

    pipeline = Pipeline()
    pipeline.evaluate(run_spans(None, None, None))
    linear.compile_pending()  # a packaged pattern's first search compiles it: not timed here
    memo.set_capacity(0)  # each field's run analyses the text anew, as a first sight would
    rows = []
    for size in sizes:
        for character, shape in _PIPELINE_INPUTS:
            length = size if shape == "{run}" else min(size, _CLAIM_RUN)
            text = shape.format(run=character * (length // len(character)))
            if _ANCHOR.search(text) is not None:  # it would stop there, not read it all
                raise RuntimeError(f"the anchor matches {shape!r}: pick another")
            anchor = timed(lambda t=text: _ANCHOR.search(t), limit)
            for field in ("message", "argument", "result"):
                spans = run_spans(**{field: text})
                seconds = timed(lambda s=spans: pipeline.evaluate(s), limit)
                rows.append(
                    {
                        "bytes": length,
                        "run_of": character,
                        "in": shape,
                        "field": field,
                        "ms": round(seconds * 1000, 1),
                        "stopped": seconds >= limit,
                        "anchor_ms": round(anchor * 1000, 3),
                    }
                )
                shown = f"{length} x {character!r} in {field}"
                print(f"  {shown}: {rows[-1]['ms']} ms", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern-size", type=int, default=1000, help="run length (x4 next)")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="pipeline input sizes")
    parser.add_argument("--limit", type=float, default=2.0, help="seconds before a run stops")
    parser.add_argument("--format", choices=("json", "markdown"), default="json")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    print("patterns...", file=sys.stderr)
    sweep = pattern_sweep(args.pattern_size, args.limit)
    patterns = sweep["superlinear"]
    print("pipeline...", file=sys.stderr)
    pipeline = pipeline_sweep([int(s) for s in args.sizes.split(",")], args.limit)
    if args.format == "json":
        counts = {k: v for k, v in sweep.items() if k != "superlinear"}
        print(
            json.dumps(
                {"superlinear_patterns": patterns, "pattern_sweep": counts, "pipeline": pipeline},
                indent=2,
            )
        )
        return
    print(
        f"Patterns growing faster than their input: {len(patterns)} of the "
        f"{sweep['timed_at_4n']} timed at n = {sweep['n']:,} and 4n characters; the other "
        f"{sweep['not_timed_at_4n']} of the {sweep['patterns']} patterns searched every run "
        f"of n in under {sweep['timed_from_ms']:g} ms, too fast to time their growth.\n"
    )
    print("| pattern | engine | run of | time at n | at 4n | growth |")
    print("|---|---|---|---|---|---|")
    for row in patterns:
        shown = row["pattern"].replace("|", "\\|").replace("`", "'")
        engine = row["engine"].replace("|", "\\|")
        print(
            f"| `{shown}` | {engine} | {row['character']!r} | {row['seconds'] * 1000:.1f} ms | "
            f"{row['seconds_4x'] * 1000:.1f} ms | {row['growth_4x']}x |"
        )
    print(
        "\n| input | field | pipeline | anchor: one regex search, no match, reads it all |"
        "\n|---|---|---|---|"
    )
    for row in pipeline:
        stopped = " (stopped)" if row["stopped"] else ""
        shape = "" if row["in"] == "{run}" else f" in {row['in']!r}".replace("|", "\\|")
        print(
            f"| {row['bytes']:,} x {row['run_of']!r}{shape} | {row['field']} | "
            f"{'>' if row['stopped'] else ''}{row['ms']} ms{stopped} | {row['anchor_ms']} ms |"
        )


if __name__ == "__main__":
    main()
