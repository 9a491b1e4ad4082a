"""One spelling for text that arrives in several: escaped line breaks, curly quotes.

Detectors match patterns written with plain line breaks and straight quotes; what they read
was often dumped as JSON or YAML (a line break as the two characters "\\n") or typed with
curly quotes. These helpers undo that, each only as far as its callers need.
"""

from __future__ import annotations

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["straight_apostrophes", "straight_quotes", "undo_escaped_breaks"]

# A YAML folded line: a backslash at the end of a line, and the next line's indentation.
_YAML_FOLD = compiled(r"\\\r?\n[ \t]*(?:\\(?= ))?")
_ESCAPED_BREAK = compiled(r"(?<!\\)\\+[nr]")  # from a run's start only: linear
_CURLY_QUOTES = (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"'))


@content_memo
def undo_escaped_breaks(text: str) -> str:
    """Text with the escaped line breaks of a JSON, YAML or repr dump made real ones.

    Substring tests go first: they run at memory speed, where each `sub` costs milliseconds
    on a long text of backslashes that holds nothing to undo."""
    if "\\" not in text:
        return text
    if "\\\n" in text or "\\\r" in text:
        text = _YAML_FOLD.sub("", text)
    if "\\n" in text or "\\r" in text:
        text = _ESCAPED_BREAK.sub("\n", text)
    return text


def straight_quotes(text: str) -> str:
    """Curly single and double quotes made straight (four `replace` calls: a `translate`
    table reads a text beyond ASCII a character at a time, thirty times slower)."""
    if text.isascii():
        return text
    for curly, straight in _CURLY_QUOTES:
        text = text.replace(curly, straight)
    return text


def straight_apostrophes(text: str) -> str:
    """Only the curly apostrophe (U+2019) made straight: for word lists that take "'" as part
    of a word ("don't"), where an opening quote must stay apart from the word it opens."""
    return text.replace("\u2019", "'")
