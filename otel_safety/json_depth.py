"""JSON text with every value nested past a depth cut out, in one linear pass.

Python's JSON parsers stop at a nesting depth (a `RecursionError` near 1,000 levels), and a
line the Collector wrote holds a whole batch of spans: one attribute nested too deep must
cost its own span, not the batch around it. Each container that opens past `max_depth` is
replaced by `null` (its span then fails to decode and is named, as any bad span is); the
rest of the text is left as it was, character for character.
"""

from __future__ import annotations

import re

__all__ = ["MAX_DEPTH", "cut_deep_values"]

MAX_DEPTH = 100  # what protobuf's JSON reader takes; deeper never decodes
# A string (skipped whole, escapes included) or a bracket: all that moves the depth.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def cut_deep_values(text: str, max_depth: int = MAX_DEPTH) -> tuple[str, int]:
    """(text with each container opened past `max_depth` replaced by `null`, how many)."""
    pieces: list[str] = []
    kept_from = 0  # text before this offset is in `pieces` or cut
    depth = 0
    cut_at = -1  # offset where the container being cut opened, or -1
    cut = 0
    for token in _TOKEN.finditer(text):
        char = token.group()[0]
        if char == '"':
            continue
        if char in "[{":
            depth += 1
            if depth > max_depth and cut_at < 0:
                cut_at = token.start()
        else:
            depth -= 1
            if cut_at >= 0 and depth == max_depth:
                pieces.append(text[kept_from:cut_at])
                pieces.append("null")
                kept_from = token.end()
                cut_at = -1
                cut += 1
    if cut_at >= 0:  # unclosed: the parser will say where the text ends
        return text, cut
    pieces.append(text[kept_from:])
    return "".join(pieces), cut
