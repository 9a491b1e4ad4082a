"""The detector contract's shared pieces: evidence clipping and secret masking."""

from __future__ import annotations

import pytest

from otel_safety.detectors.base import EVIDENCE_MAX_CHARS, clip, redact


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuv", "sk-abcdefghijklmnopqrstuv"),
        ("password: hunter22", "hunter22"),
        ('{"token": "abcd1234efgh"}', "abcd1234efgh"),
        ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("ghp_" + "a" * 36, "a" * 36),
        ("Bearer eyJhbGciOiJIUzI1NiIs.eyJzdWIiOiIxMjM0NTY3.SflKxwRJSMeKKF2QT4fw", "SflKxwRJ"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
    ],
)
def test_secrets_are_masked(text, secret):
    masked = redact(text)
    assert secret not in masked and "[REDACTED]" in masked


def test_ordinary_commands_are_left_alone():
    assert redact("rm -rf build && git push origin main") == "rm -rf build && git push origin main"


def test_clip_shortens_flattens_and_masks():
    clipped = clip("line one\n\nline two " + "x" * 500 + " password=swordfish")
    assert clipped.startswith("line one line two") and len(clipped) == EVIDENCE_MAX_CHARS
    assert "swordfish" not in clip("use password=swordfish now")
