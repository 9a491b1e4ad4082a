"""The characters a full case fold widens, and the texts and patterns that hold them."""

from __future__ import annotations

import sys

import pytest
import regex

from otel_safety.analysis.case_folds import WIDE_FOLDS, folds_wide, source_folds_wide

pytestmark = pytest.mark.unit


def _widening(character: str) -> bool:
    return any(
        len(form) > 1 for form in (character.casefold(), character.upper(), character.lower())
    )


_EVERY_CHARACTER = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)


def test_the_list_is_every_character_python_folds_wider():
    listed = set(regex.findall(f"[{WIDE_FOLDS}]", _EVERY_CHARACTER))
    assert listed == {c for c in _EVERY_CHARACTER if _widening(c)}


def test_a_full_case_pattern_of_a_listed_character_matches_its_wider_fold():
    """What the list is for: `regex` reads each as more characters (all but "İ", whose fold
    `regex` keeps to one character; listed all the same, which costs nothing)."""
    full_case = regex.IGNORECASE | regex.VERSION1
    for character in regex.findall(f"[{WIDE_FOLDS}]", _EVERY_CHARACTER):
        folded = character.casefold()
        if len(folded) > 1 and character != "\u0130":
            assert regex.compile(regex.escape(character), full_case).fullmatch(folded), character


@pytest.mark.parametrize(
    ("text", "wide"),
    [
        ("plain ASCII", False),
        ("the road\u2019s \u0434\u043e\u0440\u043e\u0433\u0430, caf\u00e9, \u2603", False),
        ("die Stra\u00dfe", True),
        ("\ufb01le", True),  # the ligature of f and i
        ("\u0130stanbul", True),  # capital I with a dot: "i" and a combining dot
    ],
)
def test_a_text_folds_wide_only_with_such_a_character(text, wide):
    assert folds_wide(text) is wide


@pytest.mark.parametrize(
    ("source", "wide"),
    [
        ("strasse", False),
        (r"stra\u00dfe", True),
        (r"stra\xdfe", True),
        (r"stra\x{df}e", True),
        (r"stra\337e", True),
        (r"stra\N{LATIN SMALL LETTER SHARP S}e", True),
        ("stra\u00dfe", True),
        (r"\x41\u0436", False),
        (r"\N{NO SUCH CHARACTER}", True),  # unreadable: taken for the worst
    ],
)
def test_a_pattern_source_names_such_a_character_literally_or_by_escape(source, wide):
    assert source_folds_wide(source) is wide
