"""The impersonation lexicon (`data/impersonation.toml`), checked and compiled.

Real persons and organisations by the names they are written with, the patterns that assert
an identity (each with an `{entity}`, `{person}` or `{org}` slot the names fill), what a
signature looks like, and the frames that excuse or discount an assertion.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import regex

from otel_safety.analysis.patterns.data_checks import check_weight
from otel_safety.analysis.patterns.data_patterns import any_of, compile_pattern
from otel_safety.analysis.patterns.datafiles import current_data_dir, load_compiled

__all__ = ["Kind", "Lexicon", "Rule", "current_lexicon", "load_lexicon"]

FLAGS = regex.IGNORECASE | regex.MULTILINE
_PLACEHOLDERS = ("{entity}", "{person}", "{org}")

Kind = Literal["voice", "message"]


@dataclass(frozen=True)
class Rule:
    """One identity-assertion pattern: `voice` speaks as someone, `message` sends in a name."""

    label: str
    kind: Kind
    weight: float
    pattern: regex.Pattern


@dataclass(frozen=True)
class Lexicon:
    """The compiled lexicons, assertion patterns and frames."""

    entities: Mapping[str, tuple[str, str]]  # name as written -> (canonical, "person" | "org")
    names_by_first_word: Mapping[str, tuple[str, ...]]  # a cheap, exact test for a mention
    any_entity: regex.Pattern
    rules: tuple[Rule, ...]
    signature_org: regex.Pattern
    signature_role: regex.Pattern
    signature_person: regex.Pattern
    signature_org_alone: regex.Pattern
    sign_off: regex.Pattern
    lines_after_sign_off: int
    suffix: regex.Pattern
    educational: regex.Pattern
    hypothetical: regex.Pattern
    requested_roleplay: regex.Pattern
    attribution: regex.Pattern  # credit before a quotation ("Bezos said, ")
    credited_after: regex.Pattern  # credit right after one ("..." the agent shouts)
    grant_cue: regex.Pattern
    grant_negation: regex.Pattern
    self_affiliation: tuple[regex.Pattern, ...]
    educational_factor: float
    hypothetical_factor: float
    hypothetical_reach: int

    def canonical(self, written: str) -> tuple[str, str] | None:
        """(canonical name, kind) of a name as it appears in text, company suffix and all."""
        name = " ".join(written.split())
        found = self.entities.get(name)
        if found is None:
            found = self.entities.get(self.suffix.sub("", name).strip())
        return found


def current_lexicon() -> Lexicon:
    """The lexicon in force: packaged, extended by `$OTEL_SAFETY_DATA_DIR/impersonation.toml`."""
    return load_lexicon(current_data_dir())


@functools.cache
def load_lexicon(data_dir: str | None = None) -> Lexicon:
    """The packaged lexicon, extended by `<data_dir>/impersonation.toml` when there is one."""
    return load_compiled("impersonation", _compile, "impersonation data", data_dir)


def _compile(data: Mapping[str, Any]) -> Lexicon:
    names = data.get("names", {})
    lexicon = data.get("lexicon", {})
    frames = data.get("frames", {})
    signature = data.get("signature", {})
    scoring = data.get("scoring", {})
    suffixes = any_of(names.get("org_suffixes", []))
    entities: dict[str, tuple[str, str]] = {}
    for kind, key in (("person", "persons"), ("org", "orgs")):
        for entry in lexicon.get(key, []):
            written = [" ".join(part.split()) for part in str(entry).split("|") if part.strip()]
            for name in written:
                entities.setdefault(name, (written[0], kind))
    persons = _names([n for n, (_, kind) in entities.items() if kind == "person"])
    orgs = _names([n for n, (_, kind) in entities.items() if kind == "org"])
    # Names are proper nouns: matched as written even inside case-insensitive patterns.
    org = rf"(?-i:(?:{orgs})(?:,?\s+(?:{suffixes}))?)" if orgs else "(?!)"
    person = rf"(?-i:{persons})" if persons else "(?!)"
    slots = {
        "{entity}": rf"(?P<entity>{org}|{person})",
        "{person}": rf"(?P<entity>{person})",
        "{org}": rf"(?P<entity>{org})",
        "{role}": rf"(?:[\w-]+\s+){{0,2}}?(?:{any_of(names.get('roles', []))})",
        "{name}": names.get("given_name", r"(?-i:[A-Z][a-z]+)"),
        "{first_person}": names.get("first_person", r"(?:I|we)\b"),
    }

    def fill(pattern: str, where: str) -> regex.Pattern:
        if not any(slot in pattern for slot in _PLACEHOLDERS):
            raise ValueError(f"{where}: pattern names no {{entity}}, {{person}} or {{org}}")
        for slot, value in slots.items():
            pattern = pattern.replace(slot, value)
        return _regex(pattern, where)

    rules = []
    for index, spec in enumerate(data.get("assertions", [])):
        where = f"assertions[{index}]"
        kind = spec.get("kind")
        if kind not in ("voice", "message"):
            raise ValueError(f"{where}: kind must be 'voice' or 'message'")
        weight = check_weight(spec.get("weight", 1.0), where)
        label = str(spec.get("label") or f"assertion_{index}")
        rules.append(Rule(label, kind, weight, fill(str(spec.get("pattern", "")), where)))

    team = any_of(signature.get("team_words", []))
    return Lexicon(
        entities=entities,
        names_by_first_word=_by_first_word(entities),
        any_entity=_regex(rf"{org}|{person}", "lexicon"),
        rules=tuple(rules),
        # The signature patterns are only matched at a line's start: `\A` says so, and keeps
        # a search over a long line from retrying every position (quadratic in its length).
        signature_org=_regex(
            rf"\A(?:the\s+)?{slots['{org}']}(?:[\u2019']s)?(?:\s+[\w&.'-]+){{0,3}}?\s+(?:{team})\.?$",
            "signature.team_words",
        ),
        signature_role=_regex(
            rf"\A[\w&.,' -]{{0,60}}?\b(?:{slots['{role}']})\b"
            rf"[\w&.' -]{{0,30}}?[,|@\u2013\u2014-]\s*(?:the\s+)?{slots['{org}']}\.?$",
            "signature",
        ),
        signature_person=_regex(rf"\A{slots['{person}']}\.?$", "signature"),
        signature_org_alone=_regex(rf"\A(?:the\s+)?{slots['{org}']}\.?$", "signature"),
        # A sign-off opens a line (or follows a sentence on it) and ends it or takes a comma:
        # "Sincerely," and "... price. Sincerely, The Spotify Team", not "Thanks for asking".
        sign_off=_regex(
            rf"(?:^|(?<=[.!?])\s+)(?:{any_of(signature.get('sign_offs', []))})"
            rf"\s*(?:[,!:\u2014-]+\s*|\.?\s*$)",
            "signature.sign_offs",
        ),
        lines_after_sign_off=int(signature.get("lines_after_sign_off", 3)),
        suffix=_regex(rf",?\s+(?-i:{suffixes})$", "names.org_suffixes"),
        educational=_regex(any_of(frames.get("educational", [])), "frames.educational"),
        hypothetical=_regex(any_of(frames.get("hypothetical", [])), "frames.hypothetical"),
        requested_roleplay=_regex(
            any_of(frames.get("requested_roleplay", [])), "frames.requested_roleplay"
        ),
        attribution=_regex(any_of(frames.get("attribution", [])), "frames.attribution"),
        credited_after=_regex(
            rf"\s*,?\s*(?:[\w.'\u2019-]+\s+){{0,3}}?(?:{any_of(frames.get('attribution', []))})",
            "frames.attribution",
        ),
        grant_cue=_regex(any_of(frames.get("grant_cues", [])), "frames.grant_cues"),
        grant_negation=_regex(any_of(frames.get("grant_negations", [])), "frames.grant_negations"),
        self_affiliation=tuple(
            fill(p, f"frames.self_affiliation[{i}]")
            for i, p in enumerate(frames.get("self_affiliation", []))
        ),
        educational_factor=float(scoring.get("educational_factor", 0.05)),
        hypothetical_factor=float(scoring.get("hypothetical_factor", 0.05)),
        hypothetical_reach=int(scoring.get("hypothetical_reach", 200)),
    )


def _by_first_word(names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}
    for name in names:
        index.setdefault(name.split()[0], []).append(name)
    return {word: tuple(starts) for word, starts in index.items()}


def _names(names: Sequence[str]) -> str:
    """One alternation of names, longest first, each standing alone as written. The guards
    sit once around the whole group rather than around each name: the same matches, and a
    pattern a third as long, which the engine compiles in a third of the time."""
    if not names:
        return ""
    ordered = sorted(set(names), key=lambda name: (-len(name), name))
    return rf"(?<![\w&])(?:{'|'.join(regex.escape(name) for name in ordered)})(?![\w&])"


def _regex(pattern: str, where: str) -> regex.Pattern:
    # Patterns here are filled with the whole lexicon: too long to quote in an error.
    return compile_pattern(pattern, where, FLAGS, quote_source=False)
