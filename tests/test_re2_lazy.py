"""RE2 twins and relaxed families are built on first need, once, and answer as before.

Start-up compiles some 2,000 data-file patterns; their RE2 forms (`analysis.linear` twins,
`analysis.prefilter` families) wait until a text needs them. These tests check that they
wait, that concurrent first searches build each one once, and that what they answer does
not depend on when they were built. Start-up time itself is measured in
bench/bench_detection.py, not here.
"""

from __future__ import annotations

import threading

import regex

from otel_safety.analysis import linear, prefilter
from otel_safety.analysis.prefilter import Prefilter, RelaxedFamily, relaxed_family

LONG = "an ordinary sentence about nothing much. " * 20  # ASCII, past linear.SHORT


def test_the_twin_waits_for_the_first_long_ascii_text():
    pattern = linear.compile(r"\bdelete\s+(\w+)")
    assert "twin" not in pattern.__dict__
    assert pattern.search("delete files").group(1) == "files"  # short: `regex` answers
    assert "twin" not in pattern.__dict__
    found = pattern.search(LONG + "then delete everything")
    assert found.group(1) == "everything" and found.span() == (len(LONG) + 5, len(LONG) + 22)
    assert pattern.__dict__["twin"] is not None
    assert linear.on_re2(pattern)


def test_concurrent_first_searches_build_the_twin_once(monkeypatch):
    built = []
    original = linear._twin

    def counting(backtracking):
        built.append(backtracking.pattern)
        return original(backtracking)

    monkeypatch.setattr(linear, "_twin", counting)
    pattern = linear.compile(r"(?P<n>\d+)\s*USD")
    text = LONG + "pay 40 USD"
    answers, start = [], threading.Barrier(8)

    def search() -> None:
        start.wait()
        match = pattern.search(text)
        answers.append((match.span(), match.group("n")))

    threads = [threading.Thread(target=search) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == [r"(?P<n>\d+)\s*USD"]
    assert answers == [((len(LONG) + 4, len(LONG) + 10), "40")] * 8


def test_a_pattern_re2_cannot_run_answers_through_regex_once_known():
    pattern = linear.compile(r"(?<!not )harm\w*")
    assert not linear.on_re2(pattern)  # builds it now: no twin
    assert pattern.search == pattern.backtracking.search  # `regex`'s own method, bound
    text = LONG + "not harmless, but harmful"
    assert pattern.search(text).span() == regex.search(r"(?<!not )harm\w*", text).span()
    assert pattern.findall(text) == ["harmful"]


def test_a_user_pattern_is_checked_at_load_and_its_twin_built_then(tmp_path):
    from otel_safety.detectors.injection_rules import load_rules

    (tmp_path / "injection.toml").write_text(
        "version = 1\n[[rules]]\n"
        'id = "user-rule"\ncategory = "task_hijack"\nweight = 0.5\n'
        "pattern = '\\bwipe\\s+all\\b'\n"
    )
    rules = load_rules(str(tmp_path))
    (rule,) = [r for r in rules.rules if r.id == "user-rule"]
    assert "twin" in rule.pattern.__dict__ and rule.pattern.twin is not None


def test_a_family_compiles_on_its_first_search_only(monkeypatch):
    compiled = []
    original = prefilter._compile_family
    monkeypatch.setattr(prefilter, "_compile_family", lambda s: compiled.append(s) or original(s))
    family = relaxed_family([regex.compile(p, regex.IGNORECASE) for p in (r"\bkill\b", "bomb")])
    assert family is not None and compiled == []
    assert family.may_match("a BOMB threat")
    assert not family.may_match("a quiet afternoon")
    assert len(compiled) == 1


def test_a_family_re2_refuses_proves_nothing_and_the_exact_alternation_decides():
    refused = RelaxedFamily("(unclosed")
    assert refused.regex is None
    assert refused.may_match("anything at all")
    patterns = [regex.compile(r"middle")]
    exact = Prefilter(linear.compile("(?:middle)"), whole_text=True, relaxed=refused)
    assert not exact.may_match_text("nothing here")  # as with no relaxed family at all
    assert exact.may_match_text("in the middle")
    assert Prefilter.of(patterns).may_match_text("in the middle")
