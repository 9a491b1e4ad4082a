"""Secrets a run read from a credential store, and the later calls that carry them on.

A password manager's or a vault's answer holds secrets; the same characters in a message,
a post or a request a few calls later are those secrets sent on, whatever words surround
them ("here are my backup codes: 4829-1170, ...") and whoever asked for it (an "IT support"
DM in the inbox). The trace-side guard reads the run in order: each credential-store result
gives its secret-looking words, and each later call that sends something is checked for them.

Any other tool's answer can hold a secret too, under a field that says so: an access-code
lookup's `master_alarm_code`, a key listing's `key`, an account's `password`. Those fields'
values are remembered as well, whatever tool answered.
"""

from __future__ import annotations

from typing import Any

from otel_safety.analysis.calls.record_choice import parsed_result
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["SecretLedger"]

# A secret-looking word: six or more characters with a digit in them (codes, passwords,
# keys), between blanks, quotes, brackets, commas or semicolons (a split: linear time);
# dates and times are metadata, not secrets.
_BETWEEN = compiled(r"[\s,;\"'`()\[\]{}<>|]+")
_EDGES = ".:!?*"
_DIGIT = compiled(r"\d")
_DATE_OR_TIME = compiled(r"^\d{4}-\d{2}-\d{2}|^\d{1,2}:\d{2}|^\d{1,2}/\d{1,2}/\d{2,4}$")
_MAX_SECRETS = 256  # per run: a store's answer is short; a long one is a listing
_READ_CHARS = 20_000
# A field whose name ends on a word saying its value is a secret (normalised: lower case,
# underscores): `secret_access_key`, `temp_password`, `master_alarm_code`; not the secret's
# metadata (`access_key_id`, `token_type`, `password_updated_at`).
_SECRET_FIELD = compiled(
    r"(?:^|_)(?:key|password|passwd|passcode|passphrase|secret|token|apikey|otp|pin"
    r"|combination|credentials?|(?:alarm|door|access|entry|gate|lock|master|security|safe"
    r"|keypad|admin)_code|(?:backup|recovery)_codes?)$"
)
_MIN_SECRET = 6
_MAX_FIELDS = 500  # values of one answer looked at


class SecretLedger:
    """The secret-looking words a run's credential-store calls returned, by the tool that
    returned them."""

    def __init__(self, task: str = "") -> None:
        self._secrets: dict[str, str] = {}
        self._task = task  # what the user wrote themselves is no secret the agent found

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def remember(self, tool: str, result: str) -> None:
        for word in _BETWEEN.split(result[:_READ_CHARS]):
            if len(self._secrets) >= _MAX_SECRETS:
                return
            word = word.strip(_EDGES)
            if len(word) < 6 or not _DIGIT.search(word) or _DATE_OR_TIME.match(word):
                continue
            if word not in self._task:
                self._secrets.setdefault(word, tool)

    def remember_fields(self, tool: str, result: str) -> None:
        """The values of the answer's secret-named fields (`_SECRET_FIELD`), nested ones too."""
        stack: list[tuple[str, Any]] = [("", parsed_result(result))]
        looked = 0
        while stack and looked < _MAX_FIELDS and len(self._secrets) < _MAX_SECRETS:
            name, value = stack.pop()
            looked += 1
            if isinstance(value, dict):
                stack.extend((normalize_name(str(k)), v) for k, v in value.items())
            elif isinstance(value, list):
                stack.extend((name, item) for item in value[:_MAX_FIELDS])
            elif isinstance(value, str | int) and not isinstance(value, bool):
                secret = str(value).strip()
                named = len(secret) >= _MIN_SECRET and _SECRET_FIELD.search(name)
                if named and secret not in self._task:
                    self._secrets.setdefault(secret, tool)

    def carried_by(self, arguments: str) -> str | None:
        """The tool that read a secret `arguments` carry (never the secret itself), or None."""
        return next((tool for secret, tool in self._secrets.items() if secret in arguments), None)
