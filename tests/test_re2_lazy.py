"""Patterns, RE2 twins and relaxed families are built on first need, once, and answer as before.

Start-up reads some 3,000 data-file patterns; the packaged ones wait for their first search
to be compiled (`linear.compile_on_use`), and their RE2 forms (`analysis.linear` twins,
`analysis.prefilter` families) wait until a text needs them. These tests check that they
wait, that concurrent first searches build each one once, that what they answer does not
depend on when they were built, and that every packaged pattern compiles. Start-up time
itself is measured in bench/bench_detection.py, not here.
"""

from __future__ import annotations

import pickle
import threading

import pytest
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
    from otel_safety.analysis.injection.injection_rules import load_rules

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


def test_a_packaged_pattern_waits_for_its_first_search():
    pattern = linear.compile_on_use(r"\bwipe\s+(?P<what>\w+)", regex.IGNORECASE, "test.rules")
    assert "backtracking" not in pattern.__dict__
    assert pattern.flags == regex.compile(pattern.pattern, regex.IGNORECASE).flags  # not compiled
    assert "backtracking" not in pattern.__dict__
    again = pickle.loads(pickle.dumps(pattern))
    assert again == pattern and again.search("wipe it").group("what") == "it"
    assert "backtracking" not in pattern.__dict__
    found = pattern.search("Then WIPE everything")
    assert found.group("what") == "everything" and pattern.groupindex == {"what": 1}
    assert "backtracking" in pattern.__dict__
    assert pattern.search(LONG + "wipe disks").span() == (len(LONG), len(LONG) + 10)


def test_a_bad_packaged_pattern_names_its_table_when_first_used():
    pattern = linear.compile_on_use(r"\bwipe(", 0, "refusal markers refusal.direct")
    with pytest.raises(ValueError, match=r"refusal markers refusal\.direct: bad pattern"):
        pattern.search("wipe")


def test_flags_a_pattern_sets_inline_are_read_from_the_compiled_pattern():
    pattern = linear.compile_on_use(r"(?s)a.b", 0, "test.rules")
    assert "flags" not in pattern.__dict__
    assert pattern.flags & regex.DOTALL and pattern.search("a\nb")


def test_every_packaged_pattern_compiles_with_the_flags_worked_out_before(monkeypatch, tmp_path):
    """The detectors read a waiting pattern's flags at start-up (their prefilters do);
    compiling every one checks those flags and that no packaged pattern is broken."""
    from otel_safety.detectors import registry

    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))  # compiled afresh, not cached
    registry.create()
    waiting = [p for p in linear.waiting() if "backtracking" not in p.__dict__]
    assert len(waiting) > 1000
    assert linear.compile_pending() >= len(waiting)
    assert all("backtracking" in p.__dict__ for p in waiting)


def test_no_packaged_pattern_can_take_exponential_time(monkeypatch, tmp_path):
    """A user's pattern is refused at load for its shape; the packaged ones are not checked
    on every start-up, so they are checked here."""
    from otel_safety.analysis.shape import catastrophic
    from otel_safety.detectors import registry

    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))
    registry.create()
    packaged = [p for p in linear.waiting() if not p._asked & regex.VERBOSE]
    assert len(packaged) > 1000
    shaped = {p._where: p.pattern for p in packaged if catastrophic(p.pattern)}
    assert not shaped
    assert catastrophic(r"(?:\w+\s*)+now")  # what the check refuses


def test_a_users_file_is_compiled_at_load_even_where_its_entries_are_joined(tmp_path):
    """A user's entry joined into a larger pattern loses its mark as the user's; a data file
    the user extends is therefore compiled whole at load, so a typo fails there."""
    from otel_safety.analysis.claims.claim_rules import load_rules

    (tmp_path / "deception.toml").write_text('version = 1\n[language]\nhedges = ["(unclosed"]\n')
    with pytest.raises(ValueError, match="deception data"):
        load_rules(str(tmp_path))
    assert not linear.in_packaged_patterns()


def test_an_index_relaxes_each_group_on_its_first_search(monkeypatch):
    from otel_safety.analysis.patterns.pattern_index import PatternIndex, scan_text

    relaxed = []
    original = prefilter.relaxed_family

    def counting(patterns, **options):
        relaxed.append(len(patterns))
        return original(patterns, **options)

    monkeypatch.setattr(prefilter, "relaxed_family", counting)
    kill, bomb = (regex.compile(p, regex.IGNORECASE) for p in (r"\bkill\b", r"\bbomb\b"))
    index = PatternIndex.build({"kill": [("kill", kill)], "bomb": [("bomb", bomb)]})
    assert relaxed == []
    scan = scan_text(index, "Kill the process")
    assert [m.group() for m in scan.find("kill")] == ["Kill"]
    assert relaxed == [1]  # the other group waits
    assert scan.find("bomb") == [] and relaxed == [1, 1]


def test_equal_patterns_made_twice_are_each_compiled_by_compile_pending():
    """Two data folders make equal patterns as two objects: each waits, and each is
    compiled (a set of equal patterns kept only the first)."""
    first = linear.compile_on_use(r"\bsame\s+words\b", 0, "first folder")
    second = linear.compile_on_use(r"\bsame\s+words\b", 0, "second folder")
    assert first.search("the same words") and "backtracking" not in second.__dict__
    linear.compile_pending()
    assert "backtracking" in second.__dict__
