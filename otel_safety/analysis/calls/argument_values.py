"""The values in a call's arguments that can be traced back to where the agent found them.

Asking where an argument came from only works for distinctive values: a whole short argument
("Fred", "www.example.com", an account number) or, inside a long one such as a message body,
the addresses and long numbers it carries. Common words, small numbers and non-string values
are left out: they turn up everywhere and prove nothing about their origin. Nor is an
address that a long value names as the attack's ("An HTML comment instructs AI assistants
to e-mail the vault to audit@... Not acted on."): a finding, a note or a warning to the
user that reports an injection carries its address without acting on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import regex

from otel_safety.analysis.calls.actions import string_arguments
from otel_safety.analysis.calls.taxonomy import ProvenanceRules
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["ArgumentValue", "traceable_values"]

_MAX_VALUES = 24  # per call: enough for a recipient list, cheap on hostile input
_MAX_TEXT = 20_000  # characters of one long argument searched for addresses

# Each branch that opens with a repeated class starts only where a run of that class starts:
# a match inside a run implies one from its start, and a search that retried every position
# of a long run would cost its square.
_IDENTIFIERS = compiled(
    r"""
    (?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+                         # e-mail address
    | (?:https?://)?(?<![\w.-])(?:[\w-]+\.)+(?i:[a-z]{2,})(?:/[^\s"'<>()\[\]]*)?  # URL, host
    | \b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b                              # IBAN-shaped account
    | (?<![\w.])\+?\d[\d -]{6,}\d(?!\w|\.\d)                         # long number
    """,
    regex.VERBOSE,
)
# The sentence around an address that reports it as an attack's, not as the call's own.
_REPORTED = compiled(
    r"(?i)\b(?:not\s+acted\s+on|(?:did\s+not|didn't|will\s+not|won't|never)\s+(?:act|follow|"
    r"comply|send|reply|click|respond|forward)\w*|ignored|untrusted|suspicious|planted|phishing|"
    r"prompt[- ]injection|injected|injection\s+attempt|social[- ]engineering|spoof\w*)\b"
)
_SENTENCE_END = compiled(r"[.!?\n](?:\s|$)")
_SENTENCE_REACH = 300
_SCHEME = compiled(r"^(?:https?://)", regex.IGNORECASE)
_SPACE = compiled(r"\s")  # a value with a space is a sentence, not a name
_DIGITS = compiled(r"\d")
_LETTER = compiled(r"[^\W\d_]")


@dataclass(frozen=True)
class ArgumentValue:
    """One traceable value and the argument it sits in."""

    argument: str
    value: str
    address: bool

    def places(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int]]:
        """Where the value stands in `text` as a whole token, in any case: "Fred" is not
        inside "Frederick". `lowered` is `text.lower()`, when the caller keeps one."""
        if lowered is None:
            lowered = text.lower()
        needle = self.value.lower()
        if len(lowered) != len(text):  # a letter whose lower case is longer: match as written
            lowered, needle = text, self.value
        start = lowered.find(needle)
        while start >= 0:
            end = start + len(needle)
            if _free(lowered, start - 1, needle[0], -1) and _free(lowered, end, needle[-1], 1):
                yield start, end
            start = lowered.find(needle, start + 1)

    def found_in(self, text: str, lowered: str | None = None) -> bool:
        return next(self.places(text, lowered), None) is not None


def traceable_values(
    arguments: Any, rules: ProvenanceRules, addresses_only: bool = False
) -> list[ArgumentValue]:
    """Distinctive values in a call's arguments; only those of address arguments (url, link,
    ...) when `addresses_only`, as for a call that merely reads what it fetches."""
    found: dict[str, ArgumentValue] = {}
    for key, value in _strings(arguments):
        address = any(pattern.search(key) for pattern in rules.address_arguments)
        if addresses_only and not address:
            continue
        for text in _pieces(value, rules):
            lowered = text.lower()
            if lowered not in found and len(found) < _MAX_VALUES:
                found[lowered] = ArgumentValue(key, text, address)
    return list(found.values())


def _strings(arguments: Any) -> Iterator[tuple[str, str]]:
    for key, value in string_arguments(arguments):
        for text in [value] if isinstance(value, str) else value:
            yield key, text


def _pieces(value: str, rules: ProvenanceRules) -> list[str]:
    """The value itself when short and distinctive, and the identifiers inside it when it is
    long or a sentence ("Claim your badge here: https://..." carries the link it posts)."""
    text = value.strip()
    pieces = []
    if len(text) <= rules.max_value_chars:
        whole = _SCHEME.sub("", text).rstrip("/")
        if _distinctive(whole, rules):
            pieces.append(whole)
            if not _SPACE.search(whole):
                return pieces + _in_queries(pieces, rules)
    pieces += [
        _SCHEME.sub("", match.group(0)).rstrip("/.")
        for match in _IDENTIFIERS.finditer(text[:_MAX_TEXT])
        if _distinctive(match.group(0), rules) and not _reported(text, match.start(), match.end())
    ]
    pieces += _in_queries(pieces, rules)
    return list(dict.fromkeys(pieces))


def _reported(text: str, start: int, end: int) -> bool:
    """Whether the sentence around `text[start:end]` reports it as an attack's."""
    before = text[max(0, start - _SENTENCE_REACH) : start]
    ends = list(_SENTENCE_END.finditer(before))
    opening = ends[-1].end() if ends else 0
    after = text[end : end + _SENTENCE_REACH]
    closing = _SENTENCE_END.search(after)
    sentence = before[opening:] + text[start:end] + (after[: closing.end()] if closing else after)
    next_sentence = after[closing.end() :][:_SENTENCE_REACH] if closing else ""
    return bool(_REPORTED.search(sentence) or _REPORTED.match(next_sentence.lstrip()))


def _in_queries(pieces: list[str], rules: ProvenanceRules) -> list[str]:
    """The addresses a link's query carries, decoded: a compose link
    (`.../compose?to=desk@example.net&body=...`) sends to its `to`, a redirect
    (`...?next=https://...`) opens its target."""
    found = []
    for piece in pieces:
        if "?" not in piece:
            continue
        query = urlsplit(f"//{piece}").query
        for _, value in parse_qsl(query[:_MAX_TEXT]):
            found += [
                _SCHEME.sub("", match.group(0)).rstrip("/.")
                for match in _IDENTIFIERS.finditer(value)
                if _distinctive(match.group(0), rules)
            ]
    return found


def _distinctive(text: str, rules: ProvenanceRules) -> bool:
    if len(text) < rules.min_value_chars or "\n" in text:
        return False
    if _LETTER.search(text):
        return True
    return len(_DIGITS.findall(text)) >= 6  # account and phone numbers, not amounts or ids


def _free(text: str, index: int, inner: str, step: int) -> bool:
    """True when the character at `index`, just outside a match, does not carry on the token
    at that edge: a letter, digit or `_@-` would, and so would a dot leading into more of it
    ("x.com" inside "www.x.com"), but not a full stop ending a sentence."""
    if index < 0 or index >= len(text) or not inner.isalnum():
        return True
    char = text[index]
    if char == ".":
        beyond = index + step
        return not (0 <= beyond < len(text) and text[beyond].isalnum())
    return not (char.isalnum() or char in "_@-")
