"""Guard verdicts written on spans are signed, so a span cannot vouch for itself.

A tool span carrying `otel_safety.guard.decision=ALLOW` would otherwise tell the
`tool_guard` detector that the call was checked and allowed. Verdicts are signed with an
HMAC over the verdict and the span it sits on; the key is `OTEL_SAFETY_GUARD_KEY` when set
(share it with a `serve` that should trust an app's inline checks), otherwise a random key
of this process, handed to its detection worker. A verdict without a valid signature is
ignored: the detector checks the call itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from typing import Any

from otel_safety.config import env_name, from_environment

__all__ = ["KEY_ENV", "key_for_children", "sign", "verify"]

KEY_ENV = env_name("guard_key")
# Read once, at import: the verdicts this process signs and checks all use one key. Only this
# variable is read, so an unrelated bad setting cannot break the import.
_KEY = (from_environment("guard_key") or secrets.token_hex(32)).encode()
# The verdict fields that decide what the detector concludes.
_SIGNED = ("decision", "risk", "category", "rule_ids", "requester", "trust", "approval")


def _message(verdict: Mapping[str, Any], span_id: str) -> bytes:
    fields = {
        name: list(value) if isinstance(value, tuple | list) else value
        for name in _SIGNED
        if (value := verdict.get(name)) is not None
    }
    return json.dumps([span_id, fields], sort_keys=True, default=str).encode()


def sign(verdict: Mapping[str, Any], span_id: str) -> str:
    """The signature of `verdict` (its fields without the prefix) on span `span_id`."""
    return hmac.new(_KEY, _message(verdict, span_id), hashlib.sha256).hexdigest()


def verify(verdict: Mapping[str, Any], span_id: str | None) -> bool:
    given = verdict.get("signature")
    if not isinstance(given, str) or span_id is None:
        return False
    return hmac.compare_digest(given, sign(verdict, span_id))


def key_for_children() -> dict[str, str]:
    """The environment a detection worker needs to trust this process's verdicts."""
    return {KEY_ENV: _KEY.decode()}
