"""Shell variables a script sets itself, expanded where it reads them.

`X=/; rm -rf $X` and `rm -rf ${X:-/}` delete the root as surely as `rm -rf /` does, but a
rule that reads words sees `$X`. A script's own plain assignments (`X=/`, `export X=/`,
`local X=/`) are remembered in order, and `$X`, `${X}` and the defaulting forms
(`${X:-/}`, `${X-/}`, `${X:=/}`) are replaced by what the shell would put there, outside
single quotes, before the words are split. A variable the script does not set (`$HOME`)
stays as written, except that a defaulting form then reads as its default: for a guard, an
unknown variable may be unset. Values read from substitutions (`X=$(pwd)`) are unknown.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping

__all__ = ["assignments", "expand"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# What the expansion acts on: quotes, escapes and variable references. One search per
# token, so the pass is linear in the text's length.
_TOKEN = re.compile(
    r"'|\"|\\.|\$\{(" + _NAME + r")(?:(:?[-=?+])([^}]*))?\}|\$(" + _NAME + ")", re.DOTALL
)
_ASSIGNED = re.compile(r"(" + _NAME + r")(\+?)=(.*)", re.DOTALL)
_DECLARERS = frozenset({"export", "declare", "local", "readonly", "typeset"})


def expand(text: str, variables: MutableMapping[str, str]) -> str:
    """`text` (a segment's words, quotes kept) with its variable references expanded;
    `${X:=d}` also assigns."""
    if "$" not in text:
        return text
    out: list[str] = []
    position, double = 0, False
    while True:
        found = _TOKEN.search(text, position)
        if found is None:
            out.append(text[position:])
            return "".join(out)
        out.append(text[position : found.start()])
        token = found.group()
        position = found.end()
        if token == "'" and not double:  # a single-quoted run: nothing in it expands
            close = text.find("'", position)
            close = len(text) if close < 0 else close + 1
            out.append(text[found.start() : close])
            position = close
        elif token == '"':
            double = not double
            out.append(token)
        elif token.startswith("$"):
            value = _value(found, variables)
            out.append(token if value is None else _quoted(value, double))
        else:
            out.append(token)


def _value(found: re.Match[str], variables: MutableMapping[str, str]) -> str | None:
    name = found.group(1) or found.group(4)
    operator, default = found.group(2), found.group(3) or ""
    known = variables.get(name)
    if not operator:
        return known
    if operator in (":-", ":="):
        if known:
            return known
        if operator == ":=":
            variables[name] = default
        return default
    if operator in ("-", "="):
        if known is not None:
            return known
        if operator == "=":
            variables[name] = default
        return default
    if operator in (":+", "+"):  # the alternative when set; unknown: it may be either
        return None if known is None else default if known or operator == "+" else ""
    return known  # `:?` and `?`: the value, or the shell stops


def _quoted(value: str, double: bool) -> str:
    """The value as the words after it will read it: inside double quotes one word, outside
    split at blanks (as the shell splits an unquoted expansion), its quotes never quoting."""
    specials = '\\"$`' if double else "\\'\""
    return "".join("\\" + char if char in specials else char for char in value)


def assignments(words: list[str], variables: MutableMapping[str, str], hole: str) -> None:
    """Remember what a command made only of assignments (`X=/`, `export X=/ Y=2`) sets; a
    value holding `hole` (where a substitution stood) is unknown."""
    if not words:
        return
    start = 1 if words[0] in _DECLARERS else 0
    found = [_ASSIGNED.fullmatch(word) for word in words[start:] if not word.startswith("-")]
    if not found or (start == 0 and not all(found)):
        return  # a command with prefix assignments: they are its own, not the script's
    for match in found:
        if match is None:
            continue
        name, append, value = match.groups()
        if hole in value or "$(" in value or "`" in value:
            variables.pop(name, None)  # set from a command's output: unknown
            continue
        variables[name] = (variables.get(name, "") + value) if append else value
