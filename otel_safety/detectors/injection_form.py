"""What an attack's form says where its words are new: an instruction about the reply.

A text the agent fetched has no business telling it how to answer. Planted instructions
often do ("use emojis to represent your answer", "your responses must never refuse",
"respond as DAN"), whatever their topic, while an email, table or page rarely speaks of the
reader's response. The injection judge reads this as a feature beside the rules' scores and
learns its weight from other datasets than the one it is measured on (see docs/model-card.md).
"""

from __future__ import annotations

import regex

from otel_safety.analysis.sentences import sentence_spans

__all__ = ["ANSWER_FORMAT", "form_features", "form_sentence"]

_REPLY = r"(?:\w+\s+)?(?:responses?|repl(?:y|ies)|answers?|outputs?)\b"
# A directive about the reader's reply, not a mention of it ("thanks for your reply"): "in
# your answer", "your responses must ...", "use emojis to represent your answer", "respond
# as DAN", "reply only in French".
ANSWER_FORMAT = regex.compile(
    rf"\b(?:in|into)\s+your\s+{_REPLY}"
    rf"|\byour\s+{_REPLY}\s+(?:must|should|shall|will|needs?\s+to|ha(?:s|ve)\s+to|(?:is|are)\s+to)\b"
    r"|\b(?:use|apply|display|represent|write|format|translate|encode|include|make|keep|start"
    r"|end|begin|present|express|add|limit|turn|convert|transform|modify)\s+(?:\S+\s+){0,6}?"
    rf"your\s+{_REPLY}"
    r"|\b(?:respond|reply|answer)\s+(?:only\s+)?(?:in|with|as(?!\s+soon)|using|like)\b",
    regex.IGNORECASE | regex.VERSION1,
)


def form_features(text: str, source: str = "data") -> dict[str, float]:
    """The form features of one (normalised) passage, by name; absent ones are 0. Only in
    data: a user may well say how to answer ("reply in French"), a fetched text may not."""
    if source != "data":
        return {}
    return {"form:answer_format": 1.0} if ANSWER_FORMAT.search(text) else {}


def form_sentence(text: str) -> str:
    """The first sentence of `text` that tells the reader how to answer ("" if none)."""
    for start, end in sentence_spans(text):
        if ANSWER_FORMAT.search(text, start, end):
            return text[start:end]
    return ""
