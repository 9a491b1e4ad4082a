"""Which patterns can take exponential time, told from their shape before they ever run.

A backtracking engine blows up when a repeated group can split the same text in many ways:
`(a+)+`, `(\\w+\\s*)*`, `(?:x+|y)+`. The tell is a repeat without an upper bound whose body,
stripped of what may match nothing, is itself only an unbounded repeat. A body with a
second mandatory piece (`(?:[\\w-]+\\.)+`: each round ends at a dot) splits text one way, so
such patterns pass. Data files are checked at load (`data_patterns.compile_pattern`) so
that a user's rule that would stall the judge is refused with its file and pattern named.
"""

from __future__ import annotations

import re

from otel_safety.analysis.patterns.regex_syntax import (
    BRANCH,
    GROUPS,
    LOOKAROUNDS,
    REPEATS,
    Node,
    parse,
)

__all__ = ["catastrophic"]

# A quantifier straight after a closing parenthesis: without one, no group is repeated and
# the pattern need not be parsed (a quantifier always follows its atom directly, outside
# verbose mode, which is not checked). An escaped `\)` only costs a parse.
_REPEATED_GROUP = re.compile(r"\)(?:[*+]|\{\d*,)")

try:
    from re._constants import MAXREPEAT
except ImportError:  # no stdlib parser: `parse` returns None and nothing is checked
    MAXREPEAT = None


def catastrophic(source: str) -> str | None:
    """A description of the nested unbounded repeat in `source`, or None when it has none
    (or the stdlib parser cannot read it: syntax only `regex` knows goes unchecked)."""
    if not _REPEATED_GROUP.search(source):
        return None  # only a group can hold a repeat, and no group here is repeated
    tree = parse(source)
    if tree is None:
        return None
    return _walk(tree)


def _walk(nodes: list[Node]) -> str | None:
    for op, argument in nodes:
        if op in REPEATS:
            _, high, body = argument
            body = list(body)
            if high == MAXREPEAT and _only_unbounded(body):
                return "an unbounded repeat of a group that is itself only an unbounded repeat"
            if (found := _walk(body)) is not None:
                return found
        elif op in GROUPS:
            if (found := _walk(list(argument[-1]))) is not None:
                return found
        elif op == BRANCH:
            for branch in argument[1]:
                if (found := _walk(list(branch))) is not None:
                    return found
        elif op in LOOKAROUNDS and (found := _walk(list(argument[-1]))) is not None:
            return found
    return None


def _only_unbounded(body: list[Node]) -> bool:
    """True when the one mandatory piece of `body` is an unbounded repeat. Two mandatory
    pieces (`\\S+\\s+`) take turns, so a text splits between them one way only."""
    mandatory = [node for node in body if not _optional(node)]
    return len(mandatory) == 1 and _unbounded(mandatory[0])


def _optional(node: Node) -> bool:
    op, argument = node
    if op in REPEATS:
        return argument[0] == 0
    if op in LOOKAROUNDS:
        return True
    if op in GROUPS:
        inner = list(argument[-1])
        return all(_optional(n) for n in inner)
    return str(op) == "AT"  # anchors and boundaries match nothing


def _unbounded(node: Node) -> bool:
    op, argument = node
    if op in REPEATS:
        return argument[1] == MAXREPEAT
    if op in GROUPS:
        return _only_unbounded(list(argument[-1]))
    if op == BRANCH:
        return any(_only_unbounded(list(branch)) for branch in argument[1])
    return False
