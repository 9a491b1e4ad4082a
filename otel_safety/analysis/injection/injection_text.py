"""Text as the injection rules see it, and matches as evidence shows them.

Injections hide: behind invisible characters that split a trigger word, in Unicode tag
characters that spell ASCII invisibly, in compatibility forms (fullwidth letters), inside JSON
or YAML dumps whose line breaks are escaped. Rules are written against plain text, so a
text is normalised before it is searched; and what a match quotes is shown with its
invisible characters named, never passed on as they are.
"""

from __future__ import annotations

import unicodedata

from otel_safety.analysis.injection.injection_disguises import undo_disguises
from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.text.text_forms import undo_escaped_breaks

__all__ = ["INVISIBLE", "normalize_for_rules", "shown"]

# Invisible characters that split words so that a rule would not see them.
INVISIBLE = compiled(r"[\u200B-\u200D\u2060-\u2064\uFEFF\u00AD]")
# Unicode tag characters spell ASCII invisibly; decode them so the hidden text is searched too.
_TAGS = compiled(r"[\U000E0020-\U000E007E]+")
# What escaped line breaks leave behind in a dump: "\t" as two characters, escaped quotes.
_ESCAPED_TAB_OR_QUOTE = compiled(r"(?<!\\)\\+(?:t|(?=[\"']))")  # run starts only
_BLANKS = compiled(r"[ \t\u00A0]{2,}|[\t\u00A0]")


@content_memo
def normalize_for_rules(text: str) -> str:
    """The text a rule sees: escapes undone, compatibility forms folded, invisibles dropped,
    spaced, dotted, leet and look-alike words written plainly, runs of spaces and tabs made one
    space (line breaks are kept for line-anchored rules)."""
    if "\\" in text:
        text = undo_escaped_breaks(text)
        if "\\t" in text or '\\"' in text or "\\'" in text:
            text = _ESCAPED_TAB_OR_QUOTE.sub(" ", text)
    if not text.isascii():
        text = _TAGS.sub(lambda m: "".join(chr(ord(c) - 0xE0000) for c in m.group()), text)
        text = INVISIBLE.sub("", text)
        text = unicodedata.normalize("NFKC", text)
    return _BLANKS.sub(" ", undo_disguises(text))


def shown(text: str) -> str:
    """Quote a match readably: invisible characters named, never passed on as they are."""
    out = []
    for char in text:
        if INVISIBLE.match(char) or "\U000e0000" <= char <= "\U000e007f" or _is_bidi(char):
            out.append(f"<U+{ord(char):04X}>")
        else:
            out.append(char)
    return "".join(out)


def _is_bidi(char: str) -> bool:
    return "\u202a" <= char <= "\u202e" or "\u2066" <= char <= "\u2069"
