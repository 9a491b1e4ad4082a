"""Whether the user's task makes instructions to a model, or attacks on one, the subject.

Asked to review a chatbot's configuration, tweak a prompt template, count the attacks in an
injection test set or summarise an article on jailbreaks, the agent reads text full of
orders to a model and of attack strings: that is what the user sent it to read. In such a
run, what a tool returned is read as material (`Source` "material" in `injection_scoring`):
its attack strings count as mentions, and a rule that hails the reader still counts in full
where the text speaks to it unquoted. Only the user's own words can make a run one of
these; nothing a tool returns can.
"""

from __future__ import annotations

import regex

from otel_safety.analysis import linear
from otel_safety.analysis.prefilter import may_occur

__all__ = ["about_model_instructions"]

# What a task names when its subject is a model's instructions or attacks on a model. "Prompt"
# alone is also an adjective ("prompt payment"): it counts after a word that makes it a noun,
# or before one that says which kind. Compiled on first use, as packaged data patterns are:
# `otel-safety detectors --compile` then works out its relaxed form ahead of time too.
_SUBJECT = linear.compile_on_use(
    r"\b(?:system|developer|user|assistant|chat|few-shot|summari[sz]ation|router|agent|bot)"
    r"\s+prompts?\b"
    r"|\bprompts?\s+(?:templates?|engineering|library|libraries|files?|repo(?:sitory)?|"
    r"injections?|design|chains?|versions?)\b"
    r"|\b(?:our|my|the|this|that)\s+(?:[\w-]+\s+){0,2}?prompt\b"
    r"(?!\s+(?:payment|delivery|reply|replies|response|attention|action|service|notice))"
    # A file name counts too ("tests/test_guardrails.py"): only a letter or digit may not
    # come before these words.
    r"|(?<![^\W_])(?:jailbreak\w*|red[-_ ]?team\w*|guardrails?(?![^\W_])|phishing|scams?\b)"
    r"|\bCTF\b"
    r"|(?<![^\W_])injection[-_\s]+(?:eval\w*|data\s*sets?|filters?|detectors?|attacks?|examples?|strings?"
    r"|payloads?|benchmarks?|tests?)\b"
    r"|\b(?:chat)?bot\W{0,2}s?\s+(?:config\w*|settings|instructions|persona|guidelines)\b",
    regex.IGNORECASE,
)


def about_model_instructions(task: str) -> bool:
    """Whether the user's task names a model's instructions or attacks on models as what to
    read ("review our support bot's configuration", "an article on prompt injection")."""
    return bool(task) and may_occur(_SUBJECT, task) and _SUBJECT.search(task) is not None
