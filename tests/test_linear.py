"""Patterns on RE2 find what `regex` finds, and a user's pattern that could be slow is refused.

`analysis.linear` runs a data-file pattern on RE2 (linear time) wherever RE2 reads it alike;
these tests check that the answers are the very ones `regex` gives (spans, groups, named
groups, iteration), on tricky cases and on every packaged pattern against real texts. Speed is
measured in bench/bench_worst_case.py, not here.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import regex
from test_analysis import dataset_texts

from otel_safety import detectors as detector_registry
from otel_safety.analysis import linear
from otel_safety.analysis.re2_syntax import translate, untranslatable


def answers(pattern, text: str, pos: int = 0) -> tuple:
    """Everything a detector may read from a pattern's search of `text`."""

    def read(match):
        return None if match is None else (match.span(), match.groups(), match.groupdict())

    return (
        read(pattern.search(text, pos)),
        read(pattern.match(text, pos)),
        read(pattern.fullmatch(text, pos)),
        [read(m) for m in pattern.finditer(text, pos)],
        pattern.findall(text, pos),
        pattern.sub("<>", text),
        pattern.split(text),
    )


# (pattern, flags, texts): each a place where a naive port to RE2 would answer differently.
CASES = [
    (r"a\sb", 0, ["a\x0bb", "a b", "a\x1cb"]),  # `regex`'s \s has the vertical tab, RE2's not
    (r"done$", 0, ["all done\n", "all done", "done\nmore"]),  # $ before a final line break
    (r"^x$", regex.MULTILINE, ["a\nx\nb", "x"]),
    (r",?\s+(?-i:(?:Inc\.?)|(?:LLC))$", regex.IGNORECASE, ["Acme Inc.", "Acme inc.", "A  LLC"]),
    (r"(?i)hello", 0, ["HeLLo there"]),
    (r"(?P<who>[A-Z]\w+)\s+(said|wrote)", 0, ["Then Alice said so", "Bob wrote"]),
    (r"(?:[\w.'-]+\s+){0,3}?(?:said|says)", regex.IGNORECASE, ["as the old man said it"]),
    (r"([A-Z]+)([A-Z][a-z])", 0, ["HTTPServer", "XMLHttpRequest"]),
    (r"(?:ran|re-?ran)(?!\w)", regex.IGNORECASE, ["I reran it", "rant", "ran."]),
    (r"(?<!\w)\.[a-z][\w.-]*", 0, ["see .env and a.b", ".gitignore"]),
    (r"\bword\b|x*", 0, ["a word, xx"]),  # may match empty: iterates on `regex`
    (r"[\w./-]+\.(?:py|js)\b", 0, ["run a/b.py now", "x.pyc", "..py"]),
    (r"\bstrasse\b", regex.IGNORECASE | regex.VERSION1, ["die Strasse", "STRASSE"]),
]


@pytest.fixture
def re2_for_all_lengths(monkeypatch):
    """RE2 for every ASCII text, not only long ones, so that short cases exercise it."""
    monkeypatch.setattr(linear, "SHORT", 0)


@pytest.mark.parametrize(("source", "flags", "texts"), CASES)
def test_a_pattern_on_re2_answers_as_regex_does(source, flags, texts, re2_for_all_lengths):
    pattern = linear.compile(source, flags)
    assert linear.on_re2(pattern), untranslatable(source, pattern.flags)
    original = regex.compile(source, flags)
    for text in texts:
        for pos in (0, 1):
            assert answers(pattern, text, pos) == answers(original, text, pos), (text, pos)


def test_the_search_runs_on_re2_for_ascii_text_only(re2_for_all_lengths, monkeypatch):
    pattern = linear.compile(r"\bword\b")
    calls = []
    monkeypatch.setattr(pattern, "_raw", lambda *args: calls.append(args) or [(-1, -1)])
    assert pattern.search("a plain word") is None  # the stand-in RE2 found nothing
    assert calls
    calls.clear()
    assert pattern.search("a plain word, naïve").span() == (8, 12)
    assert not calls


def test_short_text_is_searched_by_regex():
    pattern = linear.compile(r"x\d+")
    pattern._raw = None  # would fail if called
    assert pattern.search("ab x12 " * 5).group() == "x12"


def test_a_pattern_pickles_with_its_twin():
    pattern = pickle.loads(pickle.dumps(linear.compile(r"(?P<n>\d+)\s*USD")))
    assert linear.on_re2(pattern)
    assert pattern.search("pay " * 100 + "40 USD").group("n") == "40"


def test_text_beyond_ascii_is_searched_by_regex_with_unicode_classes():
    pattern = linear.compile(r"\bcafé\b|\d+")
    assert linear.on_re2(pattern)
    assert pattern.search("le café noir").span() == (3, 7)
    assert pattern.search("٣٤ items").group() == "٣٤"  # Arabic-Indic digits are \d to `regex`


def test_syntax_re2_cannot_run_alike_keeps_regex():
    for source in (r"(?<!not )harm", r"(['\"])x\1", r"a++b", r"(?>ab)c", r"(?x) a b", r"a(?i)b"):
        assert translate(source) is None
        pattern = linear.compile(source)
        assert not linear.on_re2(pattern)
    assert "lookaround" in untranslatable(r"(?<!not )harm")
    assert linear.compile(r"(?<!not )harm").search("it can harm you").span() == (7, 11)


def test_bounded_patterns_are_linear_on_regex_and_open_repeats_are_not():
    assert linear.linear_in_regex(r"(?<!not )harm\w{0,20}")
    assert not linear.linear_in_regex(r"(?<!not )harm\w*")
    assert not linear.linear_in_regex(r"(?<=x+)y")
    assert not linear.linear_in_regex(r"(a)\1")


def _injection_rule(directory: Path, pattern: str) -> None:
    (directory / "injection.toml").write_text(
        "version = 1\n"
        "[[rules]]\n"
        'id = "user-rule"\n'
        'category = "task_hijack"\n'
        "weight = 0.5\n"
        f"pattern = '{pattern}'\n"
    )


def test_a_user_pattern_re2_cannot_run_and_not_bounded_is_refused_at_load(tmp_path):
    from otel_safety.analysis.injection.injection_rules import load_rules

    _injection_rule(tmp_path, r"(?<=please )\w+ everything")
    with pytest.raises(ValueError) as refused:
        load_rules(str(tmp_path))
    message = str(refused.value)
    assert str(tmp_path / "injection.toml") in message
    assert "rules[" in message and "user-rule" in message  # the table and the rule
    assert r"(?<=please )\\w+ everything" in message  # the pattern, as repr shows it
    assert "lookaround" in message and "bound every repeat" in message


@pytest.mark.parametrize(
    "pattern",
    [r"\bdelete\s+everything\b", r"(?<=please )\w{1,30} everything", r"(?<!\w)wipe\s+all"],
)
def test_a_user_pattern_on_re2_or_bounded_is_accepted(tmp_path, pattern):
    from otel_safety.analysis.injection.injection_rules import load_rules

    _injection_rule(tmp_path, pattern)
    rules = load_rules(str(tmp_path))
    (rule,) = [r for r in rules.rules if r.id == "user-rule"]
    assert linear.on_re2(rule.pattern) or linear.linear_in_regex(pattern, rule.pattern.flags)


def _texts(root: Path, every: int) -> list[str]:
    """The labelled data's texts as ASCII (RE2 twins read ASCII text only)."""
    return [text.encode("ascii", "replace").decode() for text in dataset_texts(root, every, 1500)]


def test_every_packaged_pattern_on_re2_answers_as_regex_on_real_texts(
    shared_data, monkeypatch, tmp_path, re2_for_all_lengths
):
    """Every pattern the detectors compile with an RE2 twin, against real prompts, answers
    and tool results (made ASCII, the text RE2 reads): the same matches, spans and groups."""
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))  # compiled afresh, not cached
    made: dict[tuple[str, int], object] = {}
    original, on_use = linear.compile, linear.compile_on_use

    def recording(source, flags=0):
        made[(source, flags)] = pattern = original(source, flags)
        return pattern

    def recording_on_use(source, flags=0, where="pattern"):
        made[(source, flags)] = pattern = on_use(source, flags, where)
        return pattern

    monkeypatch.setattr(linear, "compile", recording)
    monkeypatch.setattr(linear, "compile_on_use", recording_on_use)
    detector_registry.create()
    monkeypatch.setattr(linear, "compile", original)
    monkeypatch.setattr(linear, "compile_on_use", on_use)
    on_re2 = [p for p in made.values() if linear.on_re2(p)]
    assert len(on_re2) > 1000
    texts = [*_texts(shared_data, every=300), "done\n", "", "Acme Inc.", "a\x0bb"]
    for pattern in on_re2:
        for text in texts:
            assert answers(pattern, text) == answers(pattern.backtracking, text), (
                pattern.pattern[:200],
                text[:200],
            )
