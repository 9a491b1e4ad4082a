"""Where an answer asserts a listed identity: speaks as it, or signs in its name.

An assertion is a match of one of the lexicon's patterns ("As CEO of {org}", "This is {name}
from {org}") naming someone in the lexicon, or a signature line that signs as them ("The
PayPal Security Team" after "Sincerely,"). A plain mention is never enough, and words inside
a quotation credited to someone else are theirs, not the answer's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from otel_safety.analysis.identity.impersonation_lexicon import Kind, Lexicon
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["Assertion", "find_assertions", "mentions_entity"]

_QUOTE = compiled(r'"[^"\n]{1,1000}"|\u201c[^\u201d]{1,1000}\u201d')
_QUOTE_LOOKBACK = 60
_QUOTE_LOOKAHEAD = 40
_SENTENCE = compiled(r"[^.!?\n]*(?:[.!?]+|\n|$)")
# A signature led by a dash ("-- Apple ID Support"); a single hyphen is a list bullet.
_DASHED = compiled(r"^[ \t>]*(?:--|\u2014|\u2013|~)[ \t]*(\S.*)$")
_WORDISH = compiled(r"\w[\w&.'\u2019-]*")
_PLAIN_WORD = compiled(r"\w[\w&.'\u2019]*")
_POSSESSIVE = compiled(r"['\u2019]s$")


@dataclass(frozen=True)
class Assertion:
    """One place where the answer speaks as, or in the name of, a listed identity."""

    entity: str
    entity_kind: str  # "person" or "org"
    label: str
    kind: Kind
    weight: float
    text: str
    start: int
    end: int


def find_assertions(text: str, lexicon: Lexicon) -> list[Assertion]:
    """Identity assertions in `text` naming a listed identity, outside quoted speech."""
    if not mentions_entity(text, lexicon):
        return []  # no listed name at all: nothing can be asserted
    quoted = _attributed_quotes(text, lexicon)
    found: dict[tuple[int, str], Assertion] = {}
    for assertion in (*_pattern_assertions(text, lexicon), *_signatures(text, lexicon)):
        if any(start <= assertion.start < end for start, end in quoted):
            continue
        found.setdefault((assertion.start, assertion.entity), assertion)
    return sorted(found.values(), key=lambda a: a.start)


def mentions_entity(text: str, lexicon: Lexicon) -> bool:
    """Whether a listed name occurs in `text`, by set operations and substring tests.

    The answer's words are taken whole ("T-Mobile", "AT&T", "U.S."), split at hyphens
    ("Microsoft-owned"), and without a trailing full stop or possessive ("Apple's"); those
    that start a name lead to a substring test of the names they start.
    """
    names = lexicon.names_by_first_word
    words = set(_WORDISH.findall(text))
    words.update(_PLAIN_WORD.findall(text))
    words.update([w.rstrip(".") for w in words] + [_POSSESSIVE.sub("", w) for w in words])
    return any(name in text for word in words & names.keys() for name in names[word])


def _pattern_assertions(text: str, lexicon: Lexicon) -> Iterator[Assertion]:
    for rule in lexicon.rules:
        for match in rule.pattern.finditer(text):
            named = lexicon.canonical(match.group("entity"))
            if named is not None:
                start = match.start("entity")
                yield Assertion(
                    named[0],
                    named[1],
                    rule.label,
                    rule.kind,
                    rule.weight,
                    _sentence_at(text, start),
                    start,
                    match.end(),
                )


def _signatures(text: str, lexicon: Lexicon) -> Iterator[Assertion]:
    """Signature lines that sign as a listed identity: after a sign-off, or led by a dash."""
    offset = 0
    remaining = 0  # non-empty lines still inside the signature block after a sign-off
    previous = ""
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        candidates: list[tuple[str, int, bool]] = []  # (text, start, after a sign-off)
        sign_off = lexicon.sign_off.search(stripped)
        if sign_off:
            remaining = lexicon.lines_after_sign_off
            rest = stripped[sign_off.end() :].strip(" ,.!")
            if rest:
                candidates.append((rest, offset + line.find(rest), True))
        elif stripped and remaining > 0:
            remaining -= 1
            candidates.append((stripped, offset + line.find(stripped), True))
        dashed = _DASHED.match(line.rstrip("\r\n"))
        if dashed and not previous.rstrip().endswith(('"', "\u201d")):  # not a quote's credit
            candidates.append((dashed.group(1).strip(), offset + dashed.start(1), False))
        for candidate, start, signed_off in candidates:
            signed = _signed_as(candidate, lexicon, signed_off)
            if signed is not None:
                end = start + len(candidate)
                yield Assertion(*signed, "signature", "message", 0.9, stripped, start, end)
        if stripped:
            previous = stripped
        offset += len(line)


def _signed_as(line: str, lexicon: Lexicon, signed_off: bool) -> tuple[str, str] | None:
    """Who a signature line signs as: an organisation's team, a role at one, or a person.

    Right after a sign-off an organisation's bare name also signs ("Sincerely,\nIRS"), when
    it cannot be a person's first name: an acronym or more than one word, not "Chase".
    """
    for pattern in (lexicon.signature_org, lexicon.signature_role, lexicon.signature_person):
        match = pattern.match(line)
        if match:
            return lexicon.canonical(match.group("entity"))
    match = lexicon.signature_org_alone.match(line) if signed_off else None
    if match and (" " in match.group("entity").strip() or match.group("entity").isupper()):
        return lexicon.canonical(match.group("entity"))
    return None


def _attributed_quotes(text: str, lexicon: Lexicon) -> list[tuple[int, int]]:
    """Quotations credited to someone ("Bezos said, "...""): their words, not the agent's."""
    spans = []
    for match in _QUOTE.finditer(text):
        before = text[max(0, match.start() - _QUOTE_LOOKBACK) : match.start()]
        after = text[match.end() : match.end() + _QUOTE_LOOKAHEAD]
        if lexicon.attribution.search(before) or lexicon.credited_after.match(after):
            spans.append(match.span())
    return spans


def _sentence_at(text: str, position: int) -> str:
    start = max(text.rfind(mark, 0, position) for mark in ".!?\n") + 1
    match = _SENTENCE.match(text, position)
    end = match.end() if match else len(text)
    return text[start:end].strip()
