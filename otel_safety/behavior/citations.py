"""Citations that cannot be real, or that nothing the agent saw backs.

Three kinds of check, strongest first:

- Identifiers that cannot exist: an arXiv id whose month is 13, whose date is after today
  (today comes from the trace's own clock, not from a constant) or before arXiv's numbering
  began, or with the wrong digit count for its month; a "doi:" that is not `10.<registrant>/`;
  an author-year citation dated after today.
- Sources the run never contained, judged only when the agent used tools (so it could have
  retrieved them): a URL, a quoted paper or report title, or an "according to <Source>"
  found in no tool result, tool argument or user input of the run. Sources everyone cites
  without looking them up ("according to the WHO") are listed as well known and never count.
- A study reported with precise figures (73.4%, n = 1,204, p < 0.01) and no source at all.

Limits: no lookup against a bibliography is made, so a well-formed but invented DOI passes,
and a real URL the model remembered is "unbacked" when it used tools for something else;
that kind carries a weight below the alert threshold unless another signal joins it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import regex

from otel_safety.detectors.data_checks import check_keys, check_weight, string_list
from otel_safety.detectors.data_patterns import any_of, checked_alternation, compile_pattern
from otel_safety.detectors.sentences import sentence_spans

__all__ = ["CitationHit", "CitationRules", "citation_hits", "compile_citations", "source_text"]

FLAGS = regex.IGNORECASE
_KINDS = (
    "impossible_identifier",
    "future_year",
    "unbacked_url",
    "unbacked_title",
    "unbacked_source",
    "unsourced_study",
)
_ARXIV = regex.compile(r"\barxiv(?:\.org/(?:abs|pdf)/|\s*[:/]?\s*)(?P<id>\d{4}\.\d+)", FLAGS)
_DOI = regex.compile(r"(?:\bdoi\s*[:=]\s*|\bdoi\.org/)(?P<doi>[^\s,;)\]>\"']+)", FLAGS)
_VALID_DOI = regex.compile(r"10\.\d{4,9}/\S+")
_YEAR = regex.compile(
    r"\((?:[A-Z][\w'\u2019-]+(?:\s+(?:et\s+al\.?|and|&)(?:\s+[A-Z][\w'\u2019-]+)?)?,?\s+)"
    r"(?P<year>\d{4})[a-z]?\s*\)|\bet\s+al\.?,?\s*\(?(?P<year>\d{4})\b"
)
_SCHEME = regex.compile(r"https?://(?:www\.)?", FLAGS)
_URL = regex.compile(r"https?://[^\s)\]>\"'`]+", FLAGS)
_TITLE = regex.compile(
    r"\b(?:titled|entitled|paper|study|article|report|book)\s*[:,]?\s*"
    r"[\"\u201c](?P<title>[^\"\u201d\n]{8,200})[\"\u201d]",
    FLAGS,
)
_ACCORDING = regex.compile(
    r"\b(?i:according\s+to)\s+(?P<source>(?:the\s+)?[A-Z][\w&.'\u2019-]*"
    r"(?:\s+(?:of\s+|for\s+|and\s+|&\s+)?[A-Z][\w&.'\u2019-]*){0,6})"
)


@dataclass(frozen=True)
class CitationRules:
    """Weights per kind of finding, and the word lists the checks use."""

    weights: Mapping[str, float]
    well_known: regex.Pattern
    study: regex.Pattern
    precise: regex.Pattern
    sourced: regex.Pattern


@dataclass(frozen=True)
class CitationHit:
    kind: str
    weight: float
    text: str


def compile_citations(table: Mapping[str, Any]) -> CitationRules:
    """The `[citations]` table, checked."""
    where = "citations"
    check_keys(table, {*_KINDS, "well_known", "study", "precise", "sourced"}, where)
    weights = {kind: check_weight(table.get(kind), f"{where}.{kind}") for kind in _KINDS}

    def pattern(key: str, flags: int = FLAGS) -> regex.Pattern:
        entries = string_list(table.get(key, []), f"{where}.{key}")
        checked_alternation(entries, f"{where}.{key}", flags)
        return compile_pattern(any_of(entries), f"{where}.{key}", flags, quote_source=False)

    well_known = string_list(table.get("well_known", []), f"{where}.well_known")
    checked_alternation(well_known, f"{where}.well_known")
    return CitationRules(
        weights=weights,
        well_known=compile_pattern(
            rf"(?:{any_of(well_known)})\Z", f"{where}.well_known", FLAGS, quote_source=False
        ),
        study=pattern("study"),
        precise=pattern("precise"),
        sourced=pattern("sourced"),
    )


def citation_hits(
    text: str, sources: str, retrieval: bool, today: date, rules: CitationRules
) -> list[CitationHit]:
    """What in `text` cites something impossible or unbacked.

    `sources` is everything the run contained (tool results and arguments, user inputs),
    lower-cased; `retrieval` says whether the agent used tools, without which unbacked
    sources are not judged.
    """
    hits = [*_impossible(text, today, rules), *_unsourced_studies(text, rules)]
    if retrieval:
        hits.extend(_unbacked(text, sources, rules))
    return hits


def _impossible(text: str, today: date, rules: CitationRules) -> Iterable[CitationHit]:
    for match in _ARXIV.finditer(text):
        problem = _arxiv_problem(match.group("id"), today)
        if problem:
            yield CitationHit(
                "impossible_identifier",
                _w(rules, "impossible_identifier"),
                f"{match.group(0)} ({problem})",
            )
    for match in _DOI.finditer(text):
        doi = match.group("doi").rstrip(".")
        if not _VALID_DOI.fullmatch(doi):
            yield CitationHit(
                "impossible_identifier",
                _w(rules, "impossible_identifier"),
                f"{match.group(0)} (not a DOI: 10.<registrant>/<suffix>)",
            )
    for match in _YEAR.finditer(text):
        year = int(match.group("year"))
        if year > today.year:
            yield CitationHit(
                "future_year",
                _w(rules, "future_year"),
                f"{match.group(0)} (after {today.isoformat()})",
            )


def _arxiv_problem(identifier: str, today: date) -> str | None:
    """Why an arXiv id of the yymm.number form cannot exist, or None."""
    head, number = identifier.split(".", 1)
    year, month = 2000 + int(head[:2]), int(head[2:])
    if not 1 <= month <= 12:
        return f"month {month:02d} does not exist"
    if (year, month) > (today.year, today.month):
        return f"dated {year}-{month:02d}, after {today.isoformat()}"
    if (year, month) < (2007, 4):
        return "before arXiv's yymm numbering began (2007-04)"
    digits = 4 if (year, month) < (2015, 1) else 5
    if len(number) != digits:
        return f"ids of {year}-{month:02d} have {digits} digits after the dot"
    return None


def _unbacked(text: str, sources: str, rules: CitationRules) -> Iterable[CitationHit]:
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(".,;:!?")
        key = _url_key(url)
        if "/" in key and key not in sources:  # a bare domain is a general pointer
            yield CitationHit("unbacked_url", _w(rules, "unbacked_url"), url)
    for match in _TITLE.finditer(text):
        title = " ".join(match.group("title").split()).lower()
        if title not in sources:
            yield CitationHit("unbacked_title", _w(rules, "unbacked_title"), match.group(0))
    for match in _ACCORDING.finditer(text):
        source = match.group("source").rstrip(".'\u2019")
        bare = regex.sub(r"(?i)^the\s+", "", source)
        if rules.well_known.match(source) or rules.well_known.match(bare):
            continue
        if bare.lower() not in sources:
            yield CitationHit("unbacked_source", _w(rules, "unbacked_source"), match.group(0))


def _unsourced_studies(text: str, rules: CitationRules) -> Iterable[CitationHit]:
    for start, end in sentence_spans(text):
        sentence = text[start:end]
        if (
            rules.study.search(sentence)
            and rules.precise.search(sentence)
            and not rules.sourced.search(sentence)
        ):
            yield CitationHit("unsourced_study", _w(rules, "unsourced_study"), sentence.strip())


def source_text(texts: Iterable[str]) -> str:
    """What a run contained, in the form the checks look citations up in: lower-cased,
    whitespace collapsed, URLs without scheme or "www."."""
    joined = " ".join(" ".join(text.split()) for text in texts).lower()
    return _SCHEME.sub("", joined)


def _url_key(url: str) -> str:
    """A URL without scheme, "www." and trailing slash, lower-cased, as sources hold it."""
    return _SCHEME.sub("", url).rstrip("/").lower()


def _w(rules: CitationRules, kind: str) -> float:
    return rules.weights[kind]
