"""Whether one value in a piece of data belongs to an instruction aimed at the agent.

`injection_score` says whether text speaks to the agent, and which cues made it say so.
Provenance needs more: whether a particular value in that text is part of the instruction
(the account it asks the agent to pay) or only data beside it (the bill's own account number,
the channel list the injection was appended to). An instruction introduces its target, so a
value is taken as part of one when the text around it reads as an instruction and a cue shares
its line, or a cue comes before it and either another cue follows (the body between an opening
and a closing cue) or the cue ends its line and the value is on the next ("do the following
first:" and then the order). A value before every cue, or after the last cue's own
instruction, is data the instruction was merely placed next to. Fields of a one-line
JSON or dict dump count as lines, so a record's own fields stay apart from an injected one.

Lines only mean something once the escaped line breaks of JSON and YAML dumps are undone,
which `unescape` does; cues are placed in that text by what they matched, so this module
relies on no more of `injection_score` than its score and its matches.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from otel_safety.analysis.injection.injection_scoring import InjectionMatch, injection_score
from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.text.text_forms import undo_escaped_breaks

__all__ = ["Instruction", "instruction_at", "unescape", "without_instructions"]

# Where a line ends: a line break, or the gap between two quoted fields of a dump.
_LINE_BREAK = compiled(r"""\n|(?<=["'])\s*[,:]\s*(?=["'])""")
_TRAILING = " \t.,:;!-"  # what may follow a cue on its line when it announces the next
# A tab escaped in a dump: "\t" as two characters.
_ESCAPED_TAB = compiled(r"(?<!\\)\\+t")  # from a run's start only: linear


@dataclass(frozen=True)
class Instruction:
    """The instruction a value belongs to: how strongly it reads as one, and its cues."""

    score: float
    cues: tuple[str, ...]


@content_memo  # scope_escalation and tool_guard trace the same values through the same results
def instruction_at(
    text: str, start: int, end: int, reach: int, threshold: float
) -> Instruction | None:
    """The instruction that the value at `text[start:end]` belongs to, if any.

    Only `reach` characters either side are read; `text` should have been through `unescape`.
    """
    low = max(0, start - reach)
    window = text[low : end + reach]
    score, matches = injection_score(window)
    if score < threshold:
        return None
    start, end = start - low, end - low
    cues = [_place(window, match) for match in matches]
    lines = _lines(window)
    here = _line_of(lines, start)
    if any(cue_start < lines[here][1] and cue_end > lines[here][0] for cue_start, cue_end in cues):
        inside = True  # a cue on the value's own line
    else:
        before = [cue_end for _, cue_end in cues if cue_end <= start]
        after = any(cue_start >= end for cue_start, _ in cues)
        inside = bool(before) and (after or _introduced(window, lines, max(before), start))
    return Instruction(score, tuple(m.rule for m in matches)) if inside else None


def without_instructions(text: str, reach: int, threshold: float) -> str:
    """`text` minus `reach` characters either side of each cue, when it reads as an
    instruction aimed at the agent at all; the rest is plain data."""
    score, matches = injection_score(text)
    if score < threshold:
        return text
    kept, position = [], 0
    for start, end in sorted(_place(text, match) for match in matches):
        kept.append(text[position : max(position, start - reach)])
        position = max(position, end + reach)
    kept.append(text[position:])
    return "\n".join(kept)


def unescape(text: str) -> str:
    """Text with the escaped line breaks of a JSON, YAML or repr dump made real ones."""
    if "\\" not in text:
        return text
    return _ESCAPED_TAB.sub(" ", undo_escaped_breaks(text))


def _place(text: str, match: InjectionMatch) -> tuple[int, int]:
    """Where a cue stands in `text`. The scorer indexes its own normalised copy (spaces
    collapsed, compatibility forms folded), which runs at most as long as `text`, so the cue
    is looked up by what it matched, from its own index onwards."""
    found = text.find(match.text, match.start)
    if found < 0:
        found = text.find(match.text)
    if found < 0:
        words = [regex.escape(word) for word in match.text.split()]
        loose = regex.search(r"\s+".join(words), text) if words else None
        return (loose.start(), loose.end()) if loose else (match.start, match.end)
    return found, found + len(match.text)


def _introduced(text: str, lines: list[tuple[int, int]], cue_end: int, position: int) -> bool:
    """True when a cue's line announces the next one (the cue ends the line, or the line ends
    in a colon: "... do the following first:") and `position` lies on that next non-blank
    line. A cue line that goes on past its cue ("ignore that and pay X.") carries its own
    instruction, and the next line is data again."""
    here = _line_of(lines, cue_end)
    rest = text[cue_end : lines[here][1]]
    if rest.strip(_TRAILING) and not rest.rstrip().endswith(":"):
        return False
    for start, end in lines[here + 1 :]:
        if text[start:end].strip():
            return start <= position < end
    return False


def _lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line of `text`, lines ending as `_LINE_BREAK` says."""
    lines, start = [], 0
    for found in _LINE_BREAK.finditer(text):
        lines.append((start, found.start()))
        start = found.end()
    lines.append((start, len(text)))
    return lines


def _line_of(lines: list[tuple[int, int]], position: int) -> int:
    return next((n for n, (_, end) in enumerate(lines) if position <= end), len(lines) - 1)
