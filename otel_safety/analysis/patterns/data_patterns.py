"""Regex patterns read from detector data files, compiled with errors that say where.

Every detector keeps its rules as TOML that users extend (see `datafiles`), so a typo in a
user's file must fail at start-up and name the table it sits in, not surface later as a bare
`regex.error` from deep inside a detector.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from otel_safety.analysis import linear
from otel_safety.analysis.patterns.datafiles import UserText
from otel_safety.analysis.re2_syntax import untranslatable
from otel_safety.analysis.shape import catastrophic

__all__ = [
    "NEVER",
    "alternation",
    "any_of",
    "check_user_fragments",
    "checked_alternation",
    "compile_pattern",
    "compile_patterns",
]

# A pattern that matches nothing: what an empty list of patterns stands for.
NEVER = "(?!)"


def compile_pattern(
    source: str, where: str, flags: int = 0, *, quote_source: bool = True
) -> linear.LinearPattern | regex.Pattern:
    """`source` compiled, or a ValueError naming `where` and the pattern.

    A pattern shaped to take exponential time on some input (`(\\w+\\s*)+`) is refused
    here, before it can stall the judge on hostile text (see `analysis.shape`). The result
    searches ASCII text on RE2 in linear time when RE2 can run the pattern alike (see
    `analysis.linear`); a pattern from a user's data file (`UserText`) that RE2 cannot run
    must have matches of bounded length (linear on `regex` too), or it is refused. Within
    `linear.packaged_patterns` (packaged data, no user file), a pattern is compiled on its
    first search instead, and the tests check its syntax and shape.
    `quote_source=False` leaves the pattern out of the message: for patterns assembled from
    whole lists (thousands of characters), where quoting them would bury the error.
    """
    shown = f" {source!r}" if quote_source else ""
    user = isinstance(source, UserText)
    packaged = not user and linear.in_packaged_patterns()
    try:
        # A packaged pattern is compiled on first need, and its shape left to the tests
        # (`linear.compile_pending`): any other is compiled and checked now, so that a typo
        # fails at start-up and names where it is.
        compiled = (
            linear.compile_on_use(source, flags, where)
            if packaged
            else linear.compile(source, flags)
        )
    except (regex.error, TypeError) as exc:
        raise ValueError(f"{where}: bad pattern{shown}: {exc}") from exc
    quoted = source if len(source) <= 200 else source[:199] + "…"
    if not packaged and not flags & regex.VERBOSE and (problem := catastrophic(source)):
        raise ValueError(
            f"{where}: pattern {quoted!r} can take exponential time on some input ({problem}); "
            "give each round of the repeat a piece of its own that the repeat inside cannot "
            "match, e.g. (?:\\w+\\s+)* instead of (?:\\w+\\s*)*"
        )
    if user and not linear.on_re2(compiled) and linear.re2 is not None:
        _check_linear(source, where, compiled.flags, quoted)
    return compiled


def _check_linear(source: UserText, where: str, flags: int, quoted: str) -> None:
    """Refuse a user's pattern that RE2 cannot run and `regex` may search in quadratic time."""
    if linear.linear_in_regex(source, flags):
        return
    reason = untranslatable(source, flags) or "RE2 cannot run it alike"
    raise ValueError(
        f"{source.path}: {where}: pattern {quoted!r} may take time growing faster than its "
        f"input: RE2 cannot run it ({reason}) and its matches have no length bound; write it "
        "without lookarounds and backreferences (\\b instead of (?<!\\w) or (?!\\w)), or "
        "bound every repeat (\\w{1,40} instead of \\w+)"
    )


def compile_patterns(
    sources: Iterable[str], where: str, flags: int = 0
) -> tuple[linear.LinearPattern | regex.Pattern, ...]:
    """Each of `sources` compiled on its own, so that an error names the bad one."""
    return tuple(compile_pattern(source, where, flags) for source in sources)


def check_user_fragments(entries: Iterable[str], where: str, flags: int = 0) -> None:
    """Check each entry a user's file gave (`UserText`) as `compile_pattern` checks a whole
    pattern, before it is wrapped into a larger one (a name's word boundaries, a case scope,
    an alternation), where it is no longer known as the user's and would go unchecked."""
    for entry in entries:
        if isinstance(entry, UserText):
            compile_pattern(entry, where, flags)


def alternation(entries: Iterable[str]) -> str:
    """One pattern matching any of `entries`, each kept whole as a non-capturing group."""
    return "|".join(f"(?:{entry})" for entry in entries)


def any_of(entries: Iterable[str]) -> str:
    """Like `alternation`, but an empty list matches nothing rather than everywhere."""
    return alternation(entries) or NEVER


def checked_alternation(entries: Iterable[str], where: str, flags: int = 0) -> str:
    """`alternation` of entries checked one by one first, so that an error names the bad
    entry rather than a position inside a long alternation."""
    entries = list(entries)
    for entry in entries:
        compile_pattern(entry, where, flags)
    return alternation(entries)
