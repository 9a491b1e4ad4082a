"""The one rate-limited log every queue and store uses: samples the log, never the counts."""

from __future__ import annotations

import logging

from otel_safety.engine import AgentStarted, SafetyEngine
from otel_safety.pipeline import Pipeline
from otel_safety.rate_limited import RateLimitedLog
from otel_safety.sidecar.metrics import ProblemLog


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_window_and_the_first_always(caplog):
    clock = Clock()
    log = RateLimitedLog(logging.getLogger("t.rate"), window=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="t.rate"):
        assert log.warning("full %d", 1)
        assert not log.warning("full %d", 2)
        clock.now += 9.9
        assert not log.warning("full %d", 3)
        clock.now += 0.2
        assert log.error("full %d", 4)
    assert [r.getMessage() for r in caplog.records] == ["full 1", "full 4"]
    assert caplog.records[1].levelno == logging.ERROR


def test_problem_log_reports_what_it_left_out(caplog):
    clock = Clock()
    problems = ProblemLog(per_second=2, clock=clock)
    with caplog.at_level(logging.WARNING, logger="otel_safety.sidecar"):
        for n in range(5):
            problems.warning("bad request %d", n)
        clock.now += 1.0
        problems.warning("bad request %d", 5)
    assert [r.getMessage() for r in caplog.records] == [
        "bad request 0",
        "bad request 1",
        "3 more such problems in the last 1s were not logged",
        "bad request 5",
    ]


def test_a_full_engine_queue_counts_every_drop_and_warns_once(span_factory, caplog):
    engine = SafetyEngine(Pipeline(detectors=[]), [], background=False, queue_size=1)
    spans = span_factory.agent_run()
    with caplog.at_level(logging.WARNING, logger="otel_safety.engine"):
        for span in spans * 5:
            engine.submit(span)
    assert engine.stats["spans_dropped"] == len(spans) * 5 - 1
    assert sum("queue full" in r.getMessage() for r in caplog.records) == 1
    engine.shutdown()


def test_a_queue_full_of_markers_says_so_when_no_span_was_dropped_yet(caplog):
    engine = SafetyEngine(Pipeline(detectors=[]), [], background=False, queue_size=1)
    with caplog.at_level(logging.WARNING, logger="otel_safety.engine"):
        for trace_id in (1, 2):
            engine.submit(AgentStarted(trace_id))
    assert "dropped 0 spans (and 1 agent-start markers) so far" in caplog.text
    engine.shutdown()
