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

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import regex

from otel_safety.behavior.rhetoric import lexicon_pattern
from otel_safety.detectors.data_checks import check_keys, check_weight
from otel_safety.detectors.sentences import sentence_spans
from otel_safety.model import Trajectory

__all__ = [
    "CitationHit",
    "CitationRules",
    "RunEvidence",
    "SourceMemory",
    "citation_hits",
    "compile_citations",
    "source_text",
]

FLAGS = regex.IGNORECASE
_SOURCE_CHARS = 20_000  # of one tool result or input kept for look-ups
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
_URL = regex.compile(r"https?://[^\s)\]<>\"'`|]+", FLAGS)
_TITLE = regex.compile(
    r"\b(?:paper|study|article|report|book|publication|review|preprint)"
    r"(?:\s+(?:titled|entitled|called))?\s*[:,]?\s*"
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
    return CitationRules(
        weights={kind: check_weight(table.get(kind), f"{where}.{kind}") for kind in _KINDS},
        well_known=lexicon_pattern(table, "well_known", where, whole=True),
        study=lexicon_pattern(table, "study", where),
        precise=lexicon_pattern(table, "precise", where),
        sourced=lexicon_pattern(table, "sourced", where),
    )


@dataclass(frozen=True)
class RunEvidence:
    """What one run contained (inputs, tool arguments and results), whether the agent used
    tools, and the run's date: the latest tool-call start, else the clock."""

    texts: tuple[str, ...]
    retrieval: bool
    today: date

    @classmethod
    def of(cls, trajectory: Trajectory, clock: Callable[[], float]) -> RunEvidence:
        texts = [trajectory.scope.text]
        texts += [m.content for m in trajectory.messages if m.role in ("user", "tool", "system")]
        for call in trajectory.tool_calls:
            texts += [call.arguments_text(), call.result or "", call.error or ""]
        starts = [call.start_ns for call in trajectory.tool_calls if call.start_ns]
        now = max(starts) / 1e9 if starts else clock()
        used = bool(trajectory.tool_calls) or any(m.role == "tool" for m in trajectory.messages)
        return cls(tuple(t for t in texts if t and t.strip()), used, _day(now))


class SourceMemory:
    """What one agent's runs contained, over a conversation: the last `limit` distinct
    texts (each cut to `_SOURCE_CHARS`), and whether it ever used tools."""

    def __init__(self, limit: int) -> None:
        self.texts: deque[str] = deque(maxlen=limit)
        self.keys: deque[str] = deque(maxlen=limit)
        self.retrieved = False
        self._joined: str | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, run: RunEvidence) -> None:
        self.retrieved = self.retrieved or run.retrieval
        known = set(self.keys)
        for text in run.texts:
            key = hashlib.blake2b(text[:_SOURCE_CHARS].encode(), digest_size=8).hexdigest()
            if key not in known:
                known.add(key)
                self.keys.append(key)
                self.texts.append(text[:_SOURCE_CHARS])
                self._joined = None

    def text(self) -> str:
        """All remembered texts in the form `citation_hits` looks citations up in."""
        if self._joined is None:
            self._joined = source_text(self.texts)
        return self._joined


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
        title = " ".join(match.group("title").split()).lower().strip(" .,;:!?")
        if title not in sources:
            yield CitationHit("unbacked_title", _w(rules, "unbacked_title"), match.group(0))
    for match in _ACCORDING.finditer(text):
        source = regex.sub(r"['\u2019]s?\Z", "", match.group("source").rstrip("."))
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


def _day(seconds: float) -> date:
    return datetime.fromtimestamp(seconds, UTC).date()


def _w(rules: CitationRules, kind: str) -> float:
    return rules.weights[kind]
