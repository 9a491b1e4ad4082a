"""Secrets a run read from a credential store, and the later calls that carry them on.

A password manager's or a vault's answer holds secrets; the same characters in a message,
a post or a request a few calls later are those secrets sent on, whatever words surround
them ("here are my backup codes: 4829-1170, ...") and whoever asked for it (an "IT support"
DM in the inbox). The trace-side guard reads the run in order: each credential-store result
gives its secret-looking words, and each later call that sends something is checked for them.
"""

from __future__ import annotations

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

    def carried_by(self, arguments: str) -> str | None:
        """The tool that read a secret `arguments` carry (never the secret itself), or None."""
        return next((tool for secret, tool in self._secrets.items() if secret in arguments), None)
