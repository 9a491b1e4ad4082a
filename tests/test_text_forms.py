"""One spelling for quotes: what the detectors' patterns are written against."""

from __future__ import annotations

import pytest

from otel_safety.analysis.text.text_forms import straight_apostrophes, straight_quotes

pytestmark = pytest.mark.unit


def test_curly_quotes_are_made_straight_and_nothing_else_changes():
    text = "\u201cI can\u2019t,\u201d she said \u2018today\u2019 \u2014 caf\u00e9 \u00ab ok \u00bb"
    assert (
        straight_quotes(text) == "\"I can't,\" she said 'today' \u2014 caf\u00e9 \u00ab ok \u00bb"
    )
    assert straight_quotes("plain 'ASCII' \"text\"") == "plain 'ASCII' \"text\""


def test_only_the_curly_apostrophe_is_made_straight_for_word_lists():
    assert straight_apostrophes("\u2018don\u2019t\u2019") == "\u2018don't'"
