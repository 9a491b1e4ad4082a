"""The fast word set reads a text as the regex `\\w+` (or `[\\w']+`) does."""

from __future__ import annotations

import pytest
import regex

from otel_safety.analysis.text.word_sets import word_set
from tests.test_analysis import dataset_texts, with_beyond_ascii


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "keep", "words"),
    [
        ("Don't rm -rf /tmp/x_y, ok?", "", {"Don", "t", "rm", "rf", "tmp", "x_y", "ok"}),
        ("Don't rm -rf /tmp/x_y, ok?", "'", {"Don't", "rm", "rf", "tmp", "x_y", "ok"}),
        ("tab\there\nline 42", "", {"tab", "here", "line", "42"}),
        (
            "caf\u00e9 \u0441\u043b\u043e\u0432\u043e",
            "",
            {"caf\u00e9", "\u0441\u043b\u043e\u0432\u043e"},
        ),
    ],
)
def test_words_are_the_runs_of_word_characters(text, keep, words):
    assert word_set(text, keep) == words


def test_word_sets_agree_with_the_regex_on_real_texts(shared_data):
    plain, kept = regex.compile(r"\w+"), regex.compile(r"[\w']+")
    texts = with_beyond_ascii(dataset_texts(shared_data, every=20))
    assert sum(t.isascii() for t in texts) > 500
    for text in texts:
        assert word_set(text) == frozenset(plain.findall(text))
        assert word_set(text, "'") == frozenset(kept.findall(text))
