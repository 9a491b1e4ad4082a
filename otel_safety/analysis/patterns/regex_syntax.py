"""The stdlib's private regex parser, borrowed to see which words a pattern starts with.

Why: `regex`, the engine every detector pattern runs on, exposes no parse tree, and the
stdlib's parser reads the same syntax for everything the index needs. `leading_words` walks
its tree to find the words every match of a pattern must start with, so that
`pattern_index` tries the pattern only where such a word occurs instead of scanning every
text with hundreds of patterns. `re._parser` and `re._constants` are private CPython modules
(under these names since Python 3.11) and may change or disappear in a later release, so
nothing else in the project imports them.

If they are unavailable: `parse` returns None, exactly as it does for a pattern written in
syntax only `regex` knows, and the pattern is searched in full. The index only ever skips
places where a pattern cannot match, so the findings are the same, only slower.
"""

from __future__ import annotations

from typing import Any

try:
    import re._constants as _sre
    import re._parser as _sre_parse
except ImportError:  # a Python without them: no pattern is indexed
    _sre = _sre_parse = None

__all__ = [
    "AT",
    "BRANCH",
    "GROUPS",
    "IN",
    "LITERAL",
    "LOOKAROUNDS",
    "REPEATS",
    "TEXT_STARTS",
    "WORD_BOUNDARIES",
    "Node",
    "parse",
]

# A node of the tree: (opcode, argument), as the stdlib parser writes them.
Node = tuple[Any, Any]


def _code(name: str, fallback: str | None = None) -> Any:
    """The parser's code `name` (`fallback` where this Python lacks it). Without the parser,
    a placeholder that equals nothing: no tree is ever read then."""
    if _sre is None:
        return object()
    return getattr(_sre, name) if fallback is None else getattr(_sre, name, getattr(_sre, fallback))


AT = _code("AT")
LITERAL = _code("LITERAL")
IN = _code("IN")
BRANCH = _code("BRANCH")
LOOKAROUNDS = (_code("ASSERT"), _code("ASSERT_NOT"))
REPEATS = (_code("MAX_REPEAT"), _code("MIN_REPEAT"), _code("POSSESSIVE_REPEAT", "MAX_REPEAT"))
GROUPS = (_code("SUBPATTERN"), _code("ATOMIC_GROUP", "SUBPATTERN"))
# Arguments of AT: \b in its three flavours, and ^ or \A.
WORD_BOUNDARIES = (_code("AT_BOUNDARY"), _code("AT_UNI_BOUNDARY"), _code("AT_LOC_BOUNDARY"))
TEXT_STARTS = (_code("AT_BEGINNING"), _code("AT_BEGINNING_STRING"))


def parse(source: str, ignore_case: bool = False) -> list[Node] | None:
    """The parse tree of `source` as a list of nodes, or None when the parser is unavailable
    or cannot read the pattern (syntax only `regex` knows)."""
    if _sre is None or _sre_parse is None:
        return None
    flags = _sre.SRE_FLAG_IGNORECASE if ignore_case else 0
    try:
        return list(_sre_parse.parse(source, flags))
    except Exception:  # any failure to read the tree: the pattern is searched in full
        return None
