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
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import cached_property
from typing import Any

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.patterns.data_checks import check_keys, check_weight
from otel_safety.analysis.sentences import sentence_spans
from otel_safety.behavior.rhetoric import lexicon_pattern
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
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC).timestamp()  # a tool start before is no date
_LEEWAY = 86_400.0  # seconds a tool start may be ahead of the clock (skew, time zones)
_RUNS = itertools.count(1)  # tells one read of a trace from another
_KINDS = (
    "impossible_identifier",
    "future_year",
    "unbacked_url",
    "unbacked_title",
    "unbacked_source",
    "unsourced_study",
)
_ARXIV = compiled(r"\barxiv(?:\.org/(?:abs|pdf)/|\s*[:/]?\s*)(?P<id>\d{4}\.\d+)", FLAGS)
_DOI = compiled(r"(?:\bdoi\s*[:=]\s*|\bdoi\.org/)(?P<doi>[^\s,;)\]>\"']+)", FLAGS)
_VALID_DOI = compiled(r"10\.\d{4,9}/\S+")
_POSSESSIVE = compiled(r"['\u2019]s?\Z")
_LEADING_THE = compiled(r"(?i)^the\s+")
_YEAR = compiled(
    r"\((?:[A-Z][\w'\u2019-]+(?:\s+(?:et\s+al\.?|and|&)(?:\s+[A-Z][\w'\u2019-]+)?)?,?\s+)"
    r"(?P<year>\d{4})[a-z]?\s*\)|\bet\s+al\.?,?\s*\(?(?P<year>\d{4})\b"
)
_SCHEME = compiled(r"https?://(?:www\.)?", FLAGS)
_URL = compiled(r"https?://[^\s)\]<>\"'`|]+", FLAGS)
_TITLE = compiled(
    r"\b(?:paper|study|article|report|book|publication|review|preprint)"
    r"(?:\s+(?:titled|entitled|called))?\s*[:,]?\s*"
    r"[\"\u201c](?P<title>[^\"\u201d\n]{8,200})[\"\u201d]",
    FLAGS,
)
_ACCORDING = compiled(
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
    tools, and the run's date: the latest plausible tool-call start, else the clock.

    `run` numbers each read of a trace, so that an agent with several turns in one trace
    remembers the trace's texts once, not once per turn."""

    texts: tuple[str, ...]
    retrieval: bool
    today: date
    run: int = field(default_factory=lambda: next(_RUNS))

    @classmethod
    def of(cls, trajectory: Trajectory, clock: Callable[[], float]) -> RunEvidence:
        texts = [trajectory.scope.text]
        texts += [m.content for m in trajectory.messages if m.role in ("user", "tool", "system")]
        for call in trajectory.tool_calls:
            texts += [call.arguments_text(), call.result or "", call.error or ""]
        now = run_time([call.start_ns for call in trajectory.tool_calls], clock())
        used = bool(trajectory.tool_calls) or any(m.role == "tool" for m in trajectory.messages)
        return cls(tuple(t for t in texts if t and t.strip()), used, _day(now))

    @cached_property
    def text(self) -> str:
        """`source_text` of the whole run, built once however many turns ask for it."""
        return source_text(self.texts)


def run_time(starts: Iterable[int | None], now: float) -> float:
    """The latest tool-call start in seconds, else `now`. Starts before 2000 or more than a
    day after `now` are broken clocks or placeholders (0, 1 ns, 10**22 ns), not the run's
    date: one of them would make every citation look future-dated, or not be a date."""
    plausible = [s / 1e9 for s in starts if s and _EARLIEST <= s / 1e9 <= now + _LEEWAY]
    return max(plausible, default=now)


class SourceMemory:
    """What one agent's runs contained, over a conversation: the last `limit` distinct
    texts (each cut to `_SOURCE_CHARS`) holding `max_chars` characters at most, oldest
    dropped first, and whether it ever used tools. A run is taken in once. Texts are kept
    in `source_text` form and joined when asked, so there is one copy, not two."""

    def __init__(self, limit: int, max_chars: int = 65_536) -> None:
        self.texts: deque[str] = deque()
        self.keys: deque[str] = deque()
        self.limit = limit
        self.max_chars = max_chars
        self.chars = 0
        self.retrieved = False
        self._last_run = 0

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, run: RunEvidence) -> None:
        if run.run == self._last_run:
            return  # another turn of the same trace: its texts are in already
        self._last_run = run.run
        self.retrieved = self.retrieved or run.retrieval
        for key, text in reversed(self._fresh(run)):
            self._push(key, text)

    def _fresh(self, run: RunEvidence) -> list[tuple[str, str]]:
        """The run's new texts, latest first, only as many as the bounds keep: the rest
        would be pushed out by later ones, so they are not normalised at all."""
        known, room = set(self.keys), self.max_chars
        fresh: list[tuple[str, str]] = []
        for text in reversed(run.texts):
            if room <= 0 or len(fresh) >= self.limit:
                break
            kept = text[: min(_SOURCE_CHARS, self.max_chars)]
            key = _digest(kept)
            if key not in known:
                known.add(key)
                fresh.append((key, source_text([kept])))
                room -= len(fresh[-1][1])
        return fresh

    def _push(self, key: str, text: str) -> None:
        self.keys.append(key)
        self.texts.append(text)
        self.chars += len(text)
        while len(self.texts) > self.limit or self.chars > self.max_chars:
            self.keys.popleft()
            self.chars -= len(self.texts.popleft())

    def text(self) -> str:
        """All remembered texts in the form `citation_hits` looks citations up in."""
        return " ".join(self.texts)


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
        source = _POSSESSIVE.sub("", match.group("source").rstrip("."))
        bare = _LEADING_THE.sub("", source)
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


def _digest(text: str) -> str:
    """A short key for a text; "surrogatepass" because JSON decoding can leave a lone
    surrogate ("\\ud800") in a string, which strict UTF-8 refuses to encode."""
    return hashlib.blake2b(text.encode(errors="surrogatepass"), digest_size=8).hexdigest()


def _day(seconds: float) -> date:
    return datetime.fromtimestamp(seconds, UTC).date()


def _w(rules: CitationRules, kind: str) -> float:
    return rules.weights[kind]
