"""The distinct words of a text, for checks that only ask whether a word occurs in it.

On ASCII text one `translate` turns every character that is not part of a word into a
space and `split` does the rest, at memory speed; a regex `findall` over a long text costs
ten times more. Texts beyond ASCII take the regex, whose `\\w` knows every script.
"""

from __future__ import annotations

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["word_set"]

_KEPT = ("", "'")  # what a word may hold besides letters, digits and "_"
_SEPARATORS = {
    keep: str.maketrans(
        {chr(c): " " for c in range(128) if not (chr(c).isalnum() or chr(c) in f"_{keep}")}
    )
    for keep in _KEPT
}
_WORDS = {"": compiled(r"\w+"), "'": compiled(r"[\w']+")}


def word_set(text: str, keep: str = "") -> frozenset[str]:
    r"""The distinct runs of word characters in `text` (as `\w+` finds them); with
    `keep="'"`, apostrophes count as word characters (`[\w']+`: "don't")."""
    if text.isascii():
        return frozenset(text.translate(_SEPARATORS[keep]).split())
    return frozenset(_WORDS[keep].findall(text))
