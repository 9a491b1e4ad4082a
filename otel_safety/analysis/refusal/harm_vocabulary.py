"""The word lists of the harm markers: `{{name}}` references, and verbs with their forms.

Harm patterns share long lists of words ("{{weapon}}", "{{kill}}"), kept once in the
`[vocab]` and `[verbs]` tables of `data/harm_markers.toml`. A `[vocab]` list holds regex
fragments as written; a `[verbs]` list holds base forms, each inflected here so that "stab"
also matches "stabs", "stabbed" and "stabbing".
"""

from __future__ import annotations

from collections.abc import Mapping

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.patterns.data_checks import string_list
from otel_safety.analysis.patterns.data_patterns import alternation

__all__ = ["expand", "inflect", "vocabulary"]

_VOCAB_REF = compiled(r"\{\{(\w+)\}\}")
_VOCAB_DEPTH = 4  # lists may use lists this many levels deep


def vocabulary(
    words: Mapping[str, list[str]], verbs: Mapping[str, list[str]]
) -> dict[str, list[str]]:
    """Word lists by name: regex fragments as written, verbs with their inflections."""
    vocab = {
        name: string_list(entries, f"refusal markers vocab.{name}")
        for name, entries in words.items()
    }
    for name, entries in verbs.items():
        if name in vocab:
            raise ValueError(f"refusal markers: {name!r} is both a vocab and a verbs list")
        vocab[name] = [
            inflect(entry) for entry in string_list(entries, f"refusal markers verbs.{name}")
        ]
    return vocab


def expand(pattern: str, vocab: Mapping[str, list[str]], where: str) -> str:
    """Replace `{{name}}` by the word list `name` as one non-capturing alternation; lists may
    use other lists, a few levels deep."""

    def word_list(match: regex.Match) -> str:
        words = vocab.get(match.group(1))
        if not words:
            raise ValueError(f"refusal markers {where}: unknown word list {match.group(0)}")
        return f"(?:{alternation(words)})"

    for _ in range(_VOCAB_DEPTH):
        if not _VOCAB_REF.search(pattern):
            return pattern
        pattern = _VOCAB_REF.sub(word_list, pattern)
    raise ValueError(f"refusal markers {where}: word lists nest too deep (a list uses itself?)")


def inflect(entry: str) -> str:
    """A base-form verb ("kill", "set fire to") as a pattern for its -s/-ed/-ing forms;
    irregular forms follow a bar ("steal|stole|stolen") and are taken as written."""
    base, *irregular = [form.strip() for form in entry.split("|") if form.strip()]
    first, _, rest = base.partition(" ")
    tail = regex.escape(" " + rest) if rest else ""
    forms = [_word_forms(first) + tail, *(regex.escape(form) for form in irregular)]
    return "(?:" + "|".join(forms) + ")"


def _word_forms(word: str) -> str:
    vowels = "aeiou"
    escaped = regex.escape(word)
    if word.endswith("ee"):
        return f"{escaped}(?:s|d|ing)?"
    if word.endswith("e"):
        return f"{regex.escape(word[:-1])}(?:e|es|ed|ing)"
    if len(word) > 2 and word[-1] == "y" and word[-2] not in vowels:
        return f"{regex.escape(word[:-1])}(?:y|ies|ied|ying)"
    doubled = ""  # "stab" -> "stabbed": a short vowel before a final consonant doubles it
    last, middle, before = word[-1], word[-2:-1], word[-3:-2]
    if last not in vowels + "wxy" and middle and middle in vowels and before not in vowels:
        doubled = f"|{last}ed|{last}ing"
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return f"{escaped}(?:es|ed|ing{doubled})?"
    return f"{escaped}(?:s|ed|ing{doubled})?"
