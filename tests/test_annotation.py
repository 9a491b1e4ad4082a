"""What the annotation adds to spans: only registry-defined attributes, on the right spans."""

from __future__ import annotations

import json

import pytest
from instrumented import run_openai_agent, run_pydantic_ai_agent

from otel_safety import semconv as sc
from otel_safety.annotate import copy_span
from otel_safety.exporters.evaluation_logs import evaluation_records
from otel_safety.mapping import span_id_hex
from otel_safety.pipeline import Pipeline


def _added(original, annotated):
    before = dict(original.attributes or {})
    added_attributes = {k for k, v in annotated.attributes.items() if before.get(k) != v}
    new_events = list(annotated.events)[len(original.events) :]
    return added_attributes, new_events


def _runs():
    bad = run_pydantic_ai_agent()
    # Give one span unreadable message JSON so notes are emitted too.
    chat = next(s for s in bad if s.attributes.get("gen_ai.operation.name") == "chat")
    broken = copy_span(chat, {"gen_ai.input.messages": "[{not json"})
    return [
        bad,
        [broken if s is chat else s for s in bad],
        run_openai_agent("openinference"),
        run_openai_agent("otel_genai"),  # names its responses (gen_ai.response.id)
    ]


@pytest.mark.process
def test_every_emitted_attribute_and_event_is_defined_in_the_registry():
    pipeline = Pipeline()
    seen: set[str] = set()
    for spans in _runs():
        evaluation = pipeline.evaluate(spans)
        for original, annotated in zip(spans, evaluation.spans, strict=True):
            attributes, events = _added(original, annotated)
            undefined = sorted(k for k in attributes if not sc.is_defined(k))
            assert undefined == [], f"{annotated.name} carries undefined attributes {undefined}"
            for event in events:
                assert event.name == sc.GEN_AI_EVALUATION_RESULT
                assert sorted(k for k in event.attributes if not sc.is_defined(k)) == []
                seen.update(event.attributes)
            seen.update(attributes)
        for record, _span in evaluation_records(evaluation):  # findings as log records
            undefined = sorted(k for k in record.attributes if not sc.is_defined(k))
            assert undefined == [], f"a finding's log record carries undefined {undefined}"
            seen.update(record.attributes)
    # The run covered the whole vocabulary the annotator emits, so the check above meant something.
    assert {
        sc.OTEL_SAFETY_ESCALATION_LEVEL,
        sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL,
        sc.OTEL_SAFETY_DETECTORS_FIRED,
        sc.OTEL_SAFETY_NOTES,
        sc.OTEL_SAFETY_MAPPING_DIALECT,
        sc.GEN_AI_EVALUATION_NAME,
        sc.OTEL_SAFETY_FINDING_SEVERITY,
        sc.OTEL_SAFETY_DETECTOR_SCORE_PREFIX + "scope_escalation",
        sc.GEN_AI_RESPONSE_ID,
    } <= seen


def test_the_guards_inline_event_carries_only_defined_attributes():
    from otel_safety.guard import Guard
    from otel_safety.guardrail import guard_attributes

    verdict = Guard().check_tool_call("run_shell", {"command": "rm -rf /"}, record=False)
    attributes = guard_attributes(verdict)
    assert sorted(k for k in attributes if not sc.is_defined(k)) == []
    assert sc.GEN_AI_GUARDRAIL_VERDICT_TYPE in attributes


def test_findings_land_on_the_span_with_the_evidence_and_the_verdict_on_the_root():
    spans = run_pydantic_ai_agent()
    evaluation = Pipeline().evaluate(spans)
    by_id = {span_id_hex(s.context.span_id): s for s in evaluation.spans}
    [finding] = [f for f in evaluation.findings if f.detected]
    flagged = by_id[finding.span_id]
    assert flagged.attributes["gen_ai.operation.name"] == "execute_tool"
    [event] = flagged.events
    assert json.loads(json.dumps(dict(event.attributes)))[sc.GEN_AI_EVALUATION_NAME] == (
        "scope_escalation"
    )
    roots = [s for s in evaluation.spans if s.parent is None]
    assert [r.attributes[sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL] for r in roots] == ["HARD_STOP"]
    untouched = [s for s in evaluation.spans if sc.OTEL_SAFETY_ESCALATION_LEVEL not in s.attributes]
    assert all(
        sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL not in s.attributes
        for s in untouched
        if s.parent is not None
    )
    carrying_verdict = [
        s.name for s in evaluation.spans if sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL in s.attributes
    ]
    assert carrying_verdict == [roots[0].name]  # only the root carries the trace's verdict


def test_spans_and_events_carry_the_guardrail_verdict_of_their_level():
    from otel_safety.guardrail import strongest

    spans = run_pydantic_ai_agent()
    evaluation = Pipeline().evaluate(spans)
    by_id = {span_id_hex(s.context.span_id): s for s in evaluation.spans}
    fired = [f for f in evaluation.findings if f.detected]
    assert fired
    for span in evaluation.spans:
        attributes = span.attributes
        level = attributes.get(sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL) or attributes.get(
            sc.OTEL_SAFETY_ESCALATION_LEVEL
        )
        if level is None:
            assert sc.GEN_AI_GUARDRAIL_VERDICT_TYPE not in attributes
            continue
        assert attributes[sc.GEN_AI_GUARDRAIL_VERDICT_TYPE] == sc.GUARDRAIL_VERDICT_BY_LEVEL[level]
        assert sc.GEN_AI_GUARDRAIL_ACTION_TYPE not in attributes  # nothing was enforced
    root = next(s for s in evaluation.spans if s.parent is None)
    top = strongest(evaluation.findings)
    assert root.attributes[sc.GEN_AI_GUARDRAIL_VERDICT_TYPE] == "deny"  # HARD_STOP
    assert root.attributes[sc.GEN_AI_GUARDRAIL_SECURITY_POLICY_ID] == top.detector
    assert root.attributes[sc.GEN_AI_GUARDRAIL_SECURITY_RISK_SCORE] == top.score
    assert root.attributes[sc.GEN_AI_GUARDRAIL_SECURITY_RISK_CATEGORY] == top.risk_category
    for finding in fired:
        [event] = [
            e
            for e in by_id[finding.span_id].events
            if e.attributes[sc.GEN_AI_EVALUATION_NAME] == finding.detector
        ]
        assert (
            event.attributes[sc.GEN_AI_GUARDRAIL_VERDICT_TYPE]
            == (sc.GUARDRAIL_VERDICT_BY_LEVEL[finding.escalation.name])
        )
        assert event.attributes[sc.GEN_AI_GUARDRAIL_SECURITY_POLICY_ID] == finding.detector
        assert event.attributes[sc.GEN_AI_GUARDRAIL_SECURITY_RISK_SCORE] == finding.score


def test_spans_judged_again_downstream_carry_each_evaluation_once(span_factory):
    """A chained serve (a sidecar forwarding to a central one) judged the annotated spans
    again and appended a second gen_ai.evaluation.result event per finding."""
    from conftest import KeywordDetector

    pipeline = Pipeline(detectors=[KeywordDetector()])
    once = pipeline.evaluate(span_factory.agent_run("BAD")).spans
    twice = Pipeline(detectors=[KeywordDetector()]).evaluate(once).spans

    def evaluations(spans):
        return sorted(
            (span.name, event.attributes[sc.GEN_AI_EVALUATION_NAME])
            for span in spans
            for event in span.events
            if event.name == sc.GEN_AI_EVALUATION_RESULT
        )

    assert evaluations(once) == [("chat model", "keyword")]
    assert evaluations(twice) == evaluations(once)


def test_verdicts_a_span_arrives_with_are_this_judges_to_say(span_factory):
    """A producer sent `otel_safety.trace.escalation.level=NONE` and a detector score on a
    span of a trace judged HARD_STOP: the stored span kept them, and misled a reader of it."""
    from conftest import KeywordDetector

    from otel_safety.annotate import rebuild_span

    forged = {
        sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL: "NONE",
        sc.OTEL_SAFETY_ESCALATION_LEVEL: "NONE",
        sc.OTEL_SAFETY_DETECTOR_SCORE_PREFIX + "keyword": 0.0,
        sc.OTEL_SAFETY_GUARD_DECISION: "ALLOW",  # signed or not, checked where it is read
    }
    spans = [
        rebuild_span(span, {**span.attributes, **forged}, span.events)
        for span in span_factory.agent_run("BAD")
    ]
    judged = Pipeline(detectors=[KeywordDetector()]).evaluate(spans)
    by_name = {span.name: span.attributes for span in judged.spans}
    assert by_name["chat model"][sc.OTEL_SAFETY_ESCALATION_LEVEL] != "NONE"
    assert by_name["chat model"][sc.OTEL_SAFETY_DETECTOR_SCORE_PREFIX + "keyword"] > 0
    assert sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL not in by_name["chat model"]  # the root's
    root = by_name["invoke_agent helper"]
    assert root[sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL] == judged.level.name != "NONE"
    assert all(
        attributes[sc.OTEL_SAFETY_GUARD_DECISION] == "ALLOW" for attributes in by_name.values()
    )
