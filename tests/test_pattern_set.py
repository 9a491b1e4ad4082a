"""One RE2 set pass per text: the entries it leaves out must never match."""

from __future__ import annotations

import regex

from otel_safety.analysis import trace_scope
from otel_safety.analysis.injection.injection_rules import current_rules as injection_rules
from otel_safety.analysis.pattern_set import PatternSet
from otel_safety.analysis.refusal.refusal_rules import current_markers
from otel_safety.analysis.text.monitor_rules import current_rules as monitor_rules
from otel_safety.detectors.agent_deception import AgentDeception
from tests.test_analysis import dataset_texts, with_beyond_ascii


def _windows(text: str) -> list[tuple[int, int]]:
    """A few (pos, endpos) windows of `text`, cut mid-word on purpose."""
    size = len(text)
    return [(0, size // 2), (size // 3, size), (size // 4, 3 * size // 4)]


def test_candidates_name_exactly_the_entries_that_can_match():
    entries = [
        [regex.compile(r"\bcannot\b", regex.IGNORECASE)],
        [regex.compile(r"^hello"), regex.compile(r"world$")],
        [regex.compile(r"\d{3}-\d{4}")],
    ]
    found = PatternSet(entries)
    assert found.candidates("I CANNOT do that") == {0}
    assert found.candidates("hello there") == {1}
    assert found.candidates("say hello") == frozenset()  # the anchor is kept for whole texts
    assert found.candidates("call 555-1234, world") == {1, 2}
    assert found.candidates("nothing here") == frozenset()
    parts = PatternSet(entries, whole_text=False)
    assert parts.candidates("say hello") == {1}  # a window starting at "hello" may match


def test_entries_re2_cannot_take_are_always_candidates():
    fuzzy = regex.compile(r"(?:secret){e<=1}")  # fuzzy matching has no RE2 form
    found = PatternSet([[fuzzy], [regex.compile("plain")]])
    assert found.candidates("nothing") == {0}
    assert found.candidates("plain text") == {0, 1}


def test_full_case_entries_are_ruled_out_in_texts_no_full_fold_widens():
    street = regex.compile(r"\bstrasse\b", regex.IGNORECASE | regex.VERSION1)
    found = PatternSet([[street]])
    assert found.candidates("the road") == frozenset()
    assert found.candidates("the road\u2019s \u0434\u043e\u0440\u043e\u0433\u0430") == frozenset()
    assert found.candidates("die STRAßE") == {0}  # ß matches "ss" under full case folding


def test_a_full_case_entry_that_names_a_widening_character_is_always_a_candidate():
    for source in ("straße", r"stra\xdfe", r"stra\N{LATIN SMALL LETTER SHARP S}e"):
        street = regex.compile(source, regex.IGNORECASE | regex.VERSION1)
        assert street.search("STRASSE")  # an ASCII text RE2 would read otherwise
        found = PatternSet([[street], [regex.compile("plain")]])
        assert found.candidates("STRASSE") == {0}
    simple = PatternSet([[regex.compile("straße", regex.IGNORECASE)]])  # no full folding
    assert simple.candidates("STRASSE") == frozenset()


def test_texts_re2_cannot_read_leave_every_entry_a_candidate():
    found = PatternSet([[regex.compile("a")], [regex.compile("b")]])
    assert found.candidates("x\ud800y") == {0, 1}  # a lone surrogate is not UTF-8


def test_a_set_re2_gives_up_on_counts_every_entry():
    found = PatternSet([[regex.compile("a")], [regex.compile("b")]])
    found._sentinel = -2  # as if RE2 had not reported the catch-all entry
    assert found.candidates("neither") == {0, 1}


def test_each_text_is_searched_once_per_trace():
    found = PatternSet([[regex.compile("a")]])
    calls = []
    search = found._search
    found._search = lambda text: calls.append(text) or search(text)  # type: ignore[method-assign]
    with trace_scope():
        found.candidates("abc")
        found.candidates("abc")
    assert calls == ["abc"]


def test_packaged_pattern_lists_never_lose_a_match_on_real_texts(shared_data):
    """The detectors' own lists (refusal marker groups, rhetoric families, monitor keywords
    and actions, injection rules) against real prompts, answers and tool results: wherever a
    pattern matches, the set must report its entry."""
    book = current_markers().book
    families = {
        name: [book.patterns[n].pattern for n in (*group.other, *_started(group))]
        for name, group in book.groups.items()
    }
    deception = AgentDeception().rules
    rhetoric = [p for f in (*deception.fallacies, *deception.manipulation) for p in f.patterns]
    monitors = monitor_rules()
    lists = [[p] for p, _ in (*monitors.keywords, *monitors.actions)]
    injection = [[r.pattern] for r in injection_rules().rules if not r.raw]
    whole = [
        (list(families.values()), PatternSet(list(families.values()))),
        ([[p] for p in rhetoric], PatternSet([[p] for p in rhetoric])),
        (lists, PatternSet(lists)),
    ]
    windowed = PatternSet(injection, whole_text=False)
    texts = with_beyond_ascii(dataset_texts(shared_data, every=40))
    checked = 0
    for text in texts:
        for entries, found in whole:
            shown = found.candidates(text)
            for number, patterns in enumerate(entries):
                if any(p.search(text) for p in patterns):
                    assert number in shown, (patterns[0].pattern[:120], text[:200])
                    checked += 1
        shown = windowed.candidates(text)
        for number, (pattern,) in enumerate(injection):
            for pos, endpos in _windows(text):
                if pattern.search(text, pos, endpos):
                    assert number in shown, (pattern.pattern[:120], text[:200])
                    checked += 1
    assert checked > 100  # the texts did exercise the lists


def _started(group) -> set[int]:
    return {number for numbers in group.by_key.values() for number in numbers}
