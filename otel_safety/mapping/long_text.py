"""What detectors read of a field longer than they may read.

Judging is bounded per field, so a longer field is read in part. Reading only its start let
an attacker pad a web page or a document past the bound and plant the instruction after it:
the agent read it, the detectors did not. A long field is therefore read as its start, its
end, and the passages around instruction cues in the part between (one linear scan), each
part set apart, so that no sentence runs across a cut.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import regex

from otel_safety.analysis import linear

# Words that open an instruction to a model rather than prose for a reader: a padded
# injection must keep one, or it no longer reads as an instruction.
_CUES = linear.compile(
    r"ignore\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+)?(?:previous|prior|above|earlier|preceding|former|other)"
    r"|disregard\b|forget\s+(?:all|everything|your|the|previous|prior)\b"
    r"|\b(?:new|updated|real|actual|secret|hidden|important|additional)\s+instructions?\b"
    r"|\binstructions?\s+(?:for|to)\s+(?:the\s+)?(?:ai|assistant|agent|model|llm)\b"
    r"|<\|(?:im_start|im_end|system|user|assistant)\|>|\[/?inst\]|<</?sys>>|</?information>"
    r"|<start_of_turn>|\bsystem\s+prompt\b|\bfrom\s+now\s+on\b|\bhenceforth\b"
    r"|\byou\s+(?:must|should|are\s+to|need\s+to)\s+(?:now|immediately|first|also)\b"
    r"|\b(?:ai|assistant|agent|model)s?\s+(?:must|should|shall)\b"
    r"|\bdo\s+not\s+(?:tell|inform|mention|reveal|notify)\b|\bwithout\s+(?:telling|informing|notifying)\b"
    r"|\bbefore\s+(?:you\s+(?:can\s+)?(?:answer|solve|reply|respond|continue|proceed)|answering|replying|proceeding)\b"
    r"|\b(?:dear|hey|hi|attention|note\s+to\s+the)\s+(?:ai|assistant|agent|model|llm|chatgpt|claude|gpt)\b"
    r"|\b(?:important|attention|urgent)\s*(?:!|:)",
    regex.IGNORECASE,
)
_TAIL = 12_000
_REACH = 700  # characters kept on each side of a cue: the instruction it opens
_WIDEST = 2 * _REACH + 200  # a passage, cue included
_GAP = "\n\n[…]\n\n"


@dataclass(frozen=True)
class Excerpt:
    text: str
    passages: int  # cue passages read from the part between start and end
    more: bool  # cues there beyond the passages' budget, left unread


def excerpt(value: str, size: int) -> Excerpt:
    """`size` characters of `value` (longer than `size`): its end, the passages around the
    first cues of its middle, and as much of its start as the rest leaves (at least half)."""
    middle_from, middle_to = size // 2, len(value) - _TAIL
    budget = size - middle_from - _TAIL - len(_GAP)
    passages: list[str] = []
    more = False
    for low, high in _cue_windows(value, middle_from, middle_to):
        if budget < high - low + len(_GAP):
            more = True  # the search stops here: a text of cues alone costs no more
            break
        passages.append(value[low:high] + _GAP)
        budget -= high - low + len(_GAP)
    tail = value[middle_to:]
    head = value[: size - len(_GAP) - sum(map(len, passages)) - len(tail)]
    return Excerpt(text=head + _GAP + "".join(passages) + tail, passages=len(passages), more=more)


def _cue_windows(value: str, low: int, high: int) -> Iterator[tuple[int, int]]:
    """Windows around the cues between `low` and `high`, in order, none overlapping another
    and none wider than `_WIDEST` (a run of cues is read as several)."""
    # As ASCII, one character for one (the cues are ASCII): the search then runs on RE2.
    middle = value[low:high].encode("ascii", "replace").decode("ascii")
    last = low
    for found in _CUES.finditer(middle):
        start = max(last, low + found.start() - _REACH)
        end = min(high, low + found.end() + _REACH, start + _WIDEST)
        if end > start:
            yield start, end
            last = end
