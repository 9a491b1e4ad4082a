"""Find and mask secrets in text: evidence never quotes one, stored spans need not keep one.

The patterns are Yelp's detect-secrets regex plugins (the `secrets` extra; a maintained set:
cloud keys, tokens of GitHub, GitLab, Slack, Stripe, npm, PyPI, OpenAI, Twilio, SendGrid,
JWTs, private keys, passwords in URLs, ...) plus a few it lacks: keyed values
(`password=...`, `api_key: ...`), fine-grained GitHub tokens, Google API keys, `sk-`/`pk-`
keys, and payment card numbers (Luhn-checked). Only the secret itself is replaced, never the
quotes or separators around it, so JSON text stays JSON.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import logging
import pkgutil
import re
from collections.abc import Iterator

import regex

from otel_safety.analysis import linear, pattern_cache
from otel_safety.analysis.pattern_set import PatternSet

__all__ = ["mask", "masked_at", "pattern_set", "secret_spans"]

logger = logging.getLogger(__name__)

MASK = "[REDACTED]"

# Matched in any case.
_BUILTIN_ANY_CASE = [
    # a keyed value: the value is the secret, the key stays readable
    r"(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|authorization|auth)"
    r"[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;]{4,})",
    # an HTTP credential (`Authorization: Bearer ...`, a header attribute or a curl line)
    r"\b(?:bearer|basic)\s+(?P<secret>[A-Za-z0-9._~+/=-]{16,})",
]
_BUILTIN = [
    r"\b(?P<secret>(?:sk|pk|rk)-[A-Za-z0-9_-]{16,})",
    r"\b(?P<secret>AKIA[0-9A-Z]{16})\b",
    # the secret key written near its access key id, with no name of its own
    r"\bAKIA[0-9A-Z]{16}\b[^\n]{0,80}?(?<![A-Za-z0-9/+=])(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    r"\b(?P<secret>gh[pousr]_[A-Za-z0-9]{20,})",
    r"\b(?P<secret>github_pat_[A-Za-z0-9_]{22,})",
    r"\b(?P<secret>AIza[0-9A-Za-z_-]{35})",
    r"\b(?P<secret>xox[abpr]-[A-Za-z0-9-]{10,})",
    r"\b(?P<secret>eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})",
    r"(?P<secret>-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE KEY-----|$))",
    r"://[^:/?#\[\]@\s\"']+:(?P<secret>[^/?#\[\]@\s\"']+)@",
]
_CARD = pattern_cache.compiled(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
# Where a card number can be: a run of 13 or more digits, spaces and hyphens. Its lookarounds
# keep `_CARD` off RE2; RE2 finds the runs, and `_CARD` searches only them.
_CARD_RUN = None if linear.re2 is None else linear.re2.compile(rb"[0-9 \-]{13,}")
# Flags with the same meaning (and value) in `re` and `regex`.
_SHARED_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE
# detect-secrets plugins that find things that are not secrets to hide (addresses).
_NOT_SECRETS = frozenset({"IPPublicDetector"})


@functools.cache
def pattern_set() -> tuple[regex.Pattern, ...]:
    """The compiled patterns: ours, then detect-secrets' when the `secrets` extra is in.
    Each searches long ASCII text on RE2 where RE2 reads it alike (`analysis.linear`): every
    stored span is masked, and a history resent by every model call of a long run is
    hundreds of megabytes."""
    patterns = [linear.compile(source, regex.IGNORECASE) for source in _BUILTIN_ANY_CASE]
    patterns += [linear.compile(source) for source in _BUILTIN]
    patterns += list(_maintained())
    return tuple(patterns)


def _maintained() -> Iterator[regex.Pattern]:
    for plugin, source, flags in _maintained_sources():
        try:
            yield linear.compile(source, flags)
        except regex.error:
            logger.debug("secret pattern of %s not usable: %s", plugin, source)


def _maintained_sources() -> tuple[tuple[str, str, int], ...]:
    """detect-secrets' patterns as (plugin, source, flags), kept in the pattern cache under
    its version: reading them means importing every plugin (and `requests`, which they
    import), which cost a process's start more than compiling the patterns themselves."""
    try:
        version = importlib.metadata.version("detect-secrets")
    except importlib.metadata.PackageNotFoundError:
        return _read_maintained()  # importable without metadata, or not there at all
    return pattern_cache.remembered("detect-secrets", version, _read_maintained, (__name__,))


def _read_maintained() -> tuple[tuple[str, str, int], ...]:
    try:
        from detect_secrets import plugins
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        return ()
    found = []
    for info in pkgutil.iter_modules(plugins.__path__):
        module = importlib.import_module(f"{plugins.__name__}.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, RegexBasedDetector)
                and cls is not RegexBasedDetector
                and cls.__module__ == module.__name__
                and name not in _NOT_SECRETS
            ):
                found += [
                    (name, pattern.pattern, int(_flags(pattern))) for pattern in cls().denylist
                ]
    return tuple(found)


def _flags(pattern: re.Pattern) -> int:
    """The pattern's flags for `regex`; VERBOSE dropped where it changes nothing (no space
    or `#` in the source), so that RE2 can prefilter the pattern (it has no such flag)."""
    flags = pattern.flags & _SHARED_FLAGS
    if flags & re.VERBOSE and not re.search(r"[\s#]", pattern.pattern):
        flags &= ~re.VERBOSE
    return flags


@functools.cache
def _patterns() -> tuple[tuple[regex.Pattern, ...], PatternSet]:
    """Every pattern, and all of them as one RE2 set: one linear pass over a text names the
    few that may match it (usually none), and only those run."""
    patterns = (*pattern_set(), _CARD)
    return patterns, PatternSet([[pattern] for pattern in patterns])


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Where the secrets in `text` are, merged and in order."""
    patterns, candidates = _patterns()
    found: list[tuple[int, int]] = []
    for number in sorted(candidates.candidates(text)):
        pattern = patterns[number]
        for match in _cards(text) if pattern is _CARD else pattern.finditer(text):
            if pattern is not _CARD:
                found.append(_secret_of(match))
            elif _luhn(match.group(0)):
                found.append(match.span())
    merged: list[tuple[int, int]] = []
    for start, end in sorted(span for span in found if span[1] > span[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _cards(text: str) -> Iterator[regex.Match]:
    """`_CARD`'s matches in `text`. In a long ASCII text, only the runs RE2 finds are searched:
    a match lies inside one run, and the characters around a run are neither digits nor
    hyphens, which is all `_CARD`'s lookarounds ask of them there."""
    if _CARD_RUN is None or len(text) < linear.SHORT or not text.isascii():
        yield from _CARD.finditer(text)
        return
    for run in _CARD_RUN.finditer(text.encode("ascii")):  # bytes: offsets are characters
        yield from _CARD.finditer(text, run.start(), run.end())


def mask(text: str) -> tuple[str, int]:
    """`text` with every secret replaced by [REDACTED], and how many there were."""
    return masked_at(text, secret_spans(text))


def masked_at(text: str, spans: list[tuple[int, int]]) -> tuple[str, int]:
    """`text` with `spans` (from `secret_spans`) replaced by [REDACTED], and how many."""
    if not spans:
        return text, 0
    parts, last = [], 0
    for start, end in spans:
        parts += [text[last:start], MASK]
        last = end
    parts.append(text[last:])
    return "".join(parts), len(spans)


def _secret_of(match: regex.Match) -> tuple[int, int]:
    """The secret inside a match: its `secret` group, else its last group, else the match
    without the separators some patterns include around it."""
    names = match.re.groupindex
    if "secret" in names and match.group("secret") is not None:
        return match.span("secret")
    for index in range(match.re.groups, 0, -1):
        if match.group(index):
            return match.span(index)
    start, end = match.span()
    while start < end and match.string[start] in " \t\n=:\"'":
        start += 1
    while end > start and match.string[end - 1] in " \t\n\"'":
        end -= 1
    return start, end


def _luhn(candidate: str) -> bool:
    digits = [int(c) for c in candidate if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for position, digit in enumerate(reversed(digits)):
        if position % 2:
            digit *= 2
            digit -= 9 if digit > 9 else 0
        total += digit
    return total % 10 == 0
