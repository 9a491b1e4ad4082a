"""The shared analysis layer: the content memo, relaxed RE2 prefilters that never hide a match."""

from __future__ import annotations

from pathlib import Path

import pytest
import regex

from otel_safety import detectors as detector_registry
from otel_safety.analysis import content_memo, linear, memo, trace_scope
from otel_safety.analysis.memo import DEFAULT_CAPACITY, ENTRY_WEIGHT, depends_on, set_capacity
from otel_safety.analysis.prefilter import Prefilter, may_occur, relaxed_family
from otel_safety.analysis.relax import relax
from otel_safety.evaluation import datasets


def _counted(calls: list[str]):
    @content_memo
    def words(text: str) -> int:
        calls.append(text)
        return len(text.split())

    return words


def test_the_memo_runs_each_text_once_across_judging_scopes_and_not_outside_one():
    calls: list[str] = []
    words = _counted(calls)
    with trace_scope():
        assert words("a b") == 2
        assert words("a b") == 2
        assert words("c") == 1
    with trace_scope():  # the next trace: its repeated texts are not analysed again
        assert words("a b") == 2
    assert calls == ["a b", "c"]
    words("a b")
    words("a b")
    assert calls == ["a b", "c", "a b", "a b"]  # no scope (the inline guard): nothing kept


def test_capacity_zero_keeps_one_traces_analyses_only():
    calls: list[str] = []
    words = _counted(calls)
    set_capacity(0)
    try:
        for _ in range(2):
            with trace_scope():
                words("a b")
                words("a b")
    finally:
        set_capacity(DEFAULT_CAPACITY)
    assert calls == ["a b", "a b"]


def test_the_memo_is_bounded_and_keeps_what_is_still_asked_for():
    calls: list[str] = []
    words = _counted(calls)
    set_capacity(2 * ENTRY_WEIGHT + 2)  # two one-letter texts
    try:
        with trace_scope():
            for text in ("a", "b", "c"):  # the third entry fills the young generation
                words(text)
            words("a")  # promoted from the old generation, not run again
            for text in ("d", "e", "f"):  # two more turnovers: "b" and "c" are dropped
                words(text)
            words("b")
    finally:
        set_capacity(DEFAULT_CAPACITY)
    assert calls == ["a", "b", "c", "d", "e", "f", "b"]


def test_a_changed_dependency_is_never_served_an_earlier_analysis():
    calls: list[str] = []
    words = _counted(calls)
    folder = ["one"]
    depends_on(lambda: folder[0])
    try:
        with trace_scope():
            words("a b")
        folder[0] = "two"
        with trace_scope():
            words("a b")
        folder[0] = "one"
        with trace_scope():  # the earlier state's memo is still kept
            words("a b")
    finally:
        memo._sources.pop()
    assert calls == ["a b", "a b"]


# Each pair: a pattern written for `regex`, and a text it matches that a naive RE2 port
# (ASCII \w and \b, no lookarounds, no possessives) would get wrong or refuse.
SUPERSET_CASES = [
    (r"(?<!not )\bharm\b", "cause harm now"),
    (r"\bcafé\b", "le café noir"),
    (r"\w+ing\b", "naïveing"),
    (r"\d{2}", "٣٤"),  # Arabic-Indic digits are \d to `regex`
    (r"a\s+b", "a\u00a0b"),  # a no-break space is \s to `regex`
    (r"(['\"])secret\1", "'secret'"),
    (r"ab{,3}c", "ac"),  # `regex` reads {,n} as {0,n}; RE2 would read it as text
    (r"ab{,}c", "abbbbc"),
    (r"ab{}c", "ab{}c"),  # an empty count is text to `regex`
    (r"(?P<q>x)y(?P=q)", "xyx"),
    (r"foo++bar", "foobar"),
    (r"(?>ab|a)c", "abc"),
    (r"[\u200b-\u200d]", "zero\u200bwidth"),
    (r"[\U000e0020-\U000e007e]+", "tag\U000e0041"),
    (r"x{0,5000}y", "xxy"),
    (r"^\s*DROP\s+TABLE\b(?!.*IF EXISTS)", "  drop table users"),
    (r"(?i:ignore) previous$", "IGNORE previous"),
    (r"a[^\w\s]b", "a-b"),
    # RE2 reads \S, \W and \D as ASCII: negated, they would shut out other scripts.
    (r"\n[^\S\n]*- ", "intro\n\u00a0\u00a0- item"),
    (r"note for (?:[^\W_]+ ){0,2}?bot:", "note for the caf\u00e9 bot: hi"),
    (r"#[^\D]+", "#\u0663\u0664"),
    # Outside negated classes the shorthands are widened to every character beyond ASCII.
    (r"caf\w+ au", "caf\u00e9 au lait"),
    (r"[\w.]+@example", "jos\u00e9.n\u00fa\u00f1ez@example"),
    (r"total:\s\d+", "total:\u00a0\u0663\u0664"),
    (r"[\s\d]+x", "\u2003\u0663x"),
    (r"a[^\W\d]b", "a\u00e9b"),
]


# (pattern, a text it matches, flags, whether the relaxed form keeps the anchors)
ANCHORED_CASES = [
    (r"done$", "all done\n", 0, True),  # `regex`'s $ also matches before a final line break
    (r"^rm\b", "rm -rf /", 0, True),
    (r"^second$", "first\nsecond\nthird", regex.MULTILINE, True),
    (r"(?m:^b)", "a\nb", 0, False),  # a scoped multi-line flag: anchors dropped
    (r"^[\w.]{0,200}`[^`]+`", "x.y`id`", 0, True),
]


@pytest.mark.parametrize(("source", "text"), SUPERSET_CASES)
@pytest.mark.parametrize("whole_text", [False, True])
def test_relaxed_form_matches_wherever_the_original_does(source, text, whole_text):
    original = regex.compile(source, regex.IGNORECASE)
    assert original.search(text), "the case itself must match"
    relaxed = relaxed_family([original], whole_text=whole_text)
    assert relaxed is not None, relax(source, regex.IGNORECASE)
    assert relaxed.may_match(text)


@pytest.mark.parametrize(("source", "text", "flags", "kept"), ANCHORED_CASES)
def test_anchors_kept_for_whole_texts_match_as_regex_reads_them(source, text, flags, kept):
    original = regex.compile(source, flags)
    assert original.search(text)
    relaxed = relaxed_family([original], whole_text=True)
    assert relaxed is not None
    assert relaxed.may_match(text)
    elsewhere = "prefix " + text.replace("\n", " ") + " suffix"
    assert bool(relaxed.may_match(elsewhere)) is not kept


def test_long_counted_repetitions_are_relaxed_to_open_ones_that_keep_their_least():
    assert relax(r"a{0,200}b") == "a*b"
    assert relax(r"a{1,500}b") == "a+b"
    assert relax(r"a{3,500}b") == "a{3,}b"
    assert relax(r"a{44}b") == "a{16,}b"  # every match still holds a run of sixteen
    assert relax(r"a{2,5}b") == "a{2,5}b"


def test_shorthands_are_widened_beyond_ascii_only_where_a_match_may_take_more():
    """RE2 compiles Unicode tables slowly (most of a family's compile, paid by every judging
    process): a shorthand that may match more is exact on ASCII and takes anything beyond
    it; one inside a negated class keeps its exact tables, or the class would leave out more."""
    for source in (r"\w+ing", r"[\w.-]+@", r"\d\s", r"[^\S\n]"):
        assert r"\p{" not in relax(source), source
    assert relax(r"a[^\w\s]b").startswith(r"a[^\p{L}\p{M}\p{N}\p{Pc}")


def test_relaxed_family_rejects_texts_without_any_match():
    family = [regex.compile(p, regex.IGNORECASE) for p in (r"\bkill\b", r"(?<!no )bomb")]
    relaxed = relaxed_family(family)
    assert relaxed is not None
    assert relaxed.may_match("a BOMB threat")
    assert not relaxed.may_match("a quiet afternoon in the garden")


def test_syntax_without_a_relaxed_form_is_left_unfiltered():
    assert relax(r"(?x) a b # comment") is None
    assert relax(r"(?:cat){e<=1}") is None
    assert relax(r"\N{BULLET}") is None
    verbose = regex.compile(r"a  b", regex.VERBOSE)
    assert relaxed_family([verbose]) is None


def test_prefilter_falls_back_to_sentences_for_context_sensitive_families():
    family = [regex.compile(r"^start"), regex.compile(r"middle")]
    prefilter = Prefilter.of(family)
    assert prefilter is not None and not prefilter.whole_text
    assert prefilter.matches("start here")
    assert not prefilter.matches("nothing")


def dataset_texts(root: Path, every: int, limit: int = 2000) -> list[str]:
    """Every `every`-th case's message texts from the labelled data, each cut to `limit`."""
    texts = []
    for case in datasets.load(root, None, with_synthetic=True)[::every]:
        for message in case.messages:
            content = message.get("content")
            if isinstance(content, str) and content:
                texts.append(content[:limit])
    return texts


def test_every_packaged_pattern_is_relaxed_to_a_superset_on_real_texts(
    shared_data, monkeypatch, tmp_path
):
    """Every pattern the detectors compile, against real prompts, answers and tool results:
    wherever the original matches, its relaxed form must too (else a prefilter would hide a
    finding)."""
    # A data folder of its own: the detectors' data is cached per folder, so this compiles
    # it afresh whichever tests ran before.
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_SAFETY_PATTERN_CACHE", "off")  # every compile recorded
    compiled: dict[tuple[str, int], regex.Pattern] = {}
    original_compile = regex.compile

    def recording(pattern, flags=0, *args, **kwargs):
        found = original_compile(pattern, flags, *args, **kwargs)
        if isinstance(pattern, str):
            compiled[(pattern, flags)] = found
        return found

    monkeypatch.setattr(regex, "compile", recording)
    detector_registry.create()
    linear.compile_pending()  # the packaged patterns that wait for their first search
    monkeypatch.setattr(regex, "compile", original_compile)
    assert len(compiled) > 2000
    texts = with_beyond_ascii(dataset_texts(shared_data, every=25))
    relaxed_count = 0
    for pattern in compiled.values():
        relaxed = relaxed_family([pattern])
        anchored = relaxed_family([pattern], whole_text=True)
        if relaxed is None or anchored is None:
            continue
        relaxed_count += 1
        for text in texts:
            if pattern.search(text):
                assert relaxed.may_match(text), (pattern.pattern[:200], text[:200])
                assert anchored.may_match(text), (pattern.pattern[:200], text[:200])
    assert relaxed_count > 0.9 * len(compiled)


def test_full_case_families_rule_out_texts_no_full_fold_widens():
    pattern = regex.compile(r"\bstrasse\b", regex.IGNORECASE | regex.VERSION1)  # FULLCASE
    assert pattern.search("die STRAßE")
    family = relaxed_family([pattern])
    assert family is not None and family.full_case
    assert family.may_match("die STRAßE")  # ß matches "ss": cannot be ruled out
    assert family.may_match("die STRA\ufb06E")  # nor a ligature of s and t
    assert not family.may_match("the road")
    assert not family.may_match("the road\u2019s \u0434\u043e\u0440\u043e\u0433\u0430")
    assert family.may_match("Strasse")


def test_a_full_case_pattern_that_names_a_widening_character_has_no_family():
    for source in ("straße", r"stra\xdfe", r"stra\u00dfe"):
        pattern = regex.compile(source, regex.IGNORECASE | regex.VERSION1)
        assert pattern.search("STRASSE")  # an ASCII text RE2 would read otherwise
        assert relaxed_family([pattern, regex.compile("plain")]) is None
    assert relaxed_family([regex.compile("straße", regex.IGNORECASE)]) is not None


def test_version1_sets_are_left_unfiltered():
    assert relax(r"[[a-z]--[aeiou]]+", regex.VERSION1) is None
    assert relax(r"[a-z&&x]", regex.VERSION1) is None
    assert relax(r"[a-z]+ing", regex.VERSION1) == "[a-z]+ing"


def with_beyond_ascii(texts: list[str]) -> list[str]:
    """`texts`, and a third of them again with curly apostrophes and a Cyrillic word, as
    models write: texts beyond ASCII take the relaxed forms' other path."""
    return texts + [
        t.replace("'", "\u2019") + " \u0441\u043b\u043e\u0432\u043e" for t in texts[::3]
    ]


def test_may_occur_rules_out_only_texts_no_part_of_which_can_match():
    opening = regex.compile(r"^sorry\b", regex.IGNORECASE)  # a sentence's opening, searched alone
    assert may_occur(opening, "Done. Sorry, one step failed.")  # its second sentence matches
    assert not may_occur(opening, "Done. All steps passed.")
    behind = regex.compile(r"(?<!not )\bfailed\b")
    assert may_occur(behind, "nothing not failed")  # the lookbehind is the exact search's
    assert not may_occur(behind, "a " * 50_000)
