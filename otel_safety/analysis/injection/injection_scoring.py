"""Scoring one piece of text for injection: which rules match, and what they add up to.

`injection_score` is meant to be reused by guards and monitors that judge a single tool
result or prompt before it reaches the model; the `injection` detector calls it on every
text an agent read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import regex

from otel_safety.analysis.injection.injection_form import OFF_TOPIC_WEIGHT, off_topic_request
from otel_safety.analysis.injection.injection_mentions import (
    is_mention,
    is_quoted,
    sentence_bounds,
)
from otel_safety.analysis.injection.injection_prefilter import candidates, text_words
from otel_safety.analysis.injection.injection_rules import (
    InjectionRule,
    InjectionRules,
    current_rules,
)
from otel_safety.analysis.injection.injection_text import normalize_for_rules

__all__ = ["InjectionMatch", "Source", "injection_score"]

# Where a text came from: the user ("input"), or a tool, retriever or document ("data"), or
# such a text in a run whose task makes a model's instructions the subject ("material": see
# `injection_subject`), where attack strings are what the user sent the agent to read.
Source = Literal["input", "data", "material"]


@dataclass(frozen=True)
class InjectionMatch:
    """One rule that matched, and how much it counts after discounting mentions.

    `start`/`end` index the normalised text (the original one for `raw` rules); `context` is
    the sentence around the match, so that a reader sees what the match was part of.
    """

    rule: str
    category: str
    weight: float
    text: str
    start: int
    end: int
    context: str
    mention: bool = False


def injection_score(text: str, source: Source = "data") -> tuple[float, list[InjectionMatch]]:
    """Score one piece of text in [0, 1] and list the rules behind the score, strongest first.

    `source="data"` (a tool result, retrieved document, web page) applies every rule;
    `source="input"` (the user's own message) skips the rules that only make sense in data;
    `source="material"` applies every rule but counts each match as a mention, unless it
    hails the reader unquoted or hides in invisible characters.
    Each rule counts once however often it matches; distinct rules combine as independent
    evidence, so the score is `1 - prod(1 - weight)`.
    """
    if not text or not text.strip():
        return 0.0, []
    rules = current_rules()
    normal = normalize_for_rules(text)
    lowered = normal.lower()
    words = text_words(lowered)
    ascii_only = text.isascii()
    shown = rules.rule_set.candidates(normal)  # the text rules that can match at all
    # Raw rules are about characters outside ASCII: tried on every text with some, never
    # on the others (the set reports every entry when it cannot read a text).
    shown = shown - rules.raw_numbers if ascii_only else shown | rules.raw_numbers
    best: dict[str, InjectionMatch] = {}
    for number in sorted(shown):  # in the file's order, as the others are never met
        rule = rules.rules[number]
        if rule.scope == "data" and source == "input":
            continue
        if rule.raw:
            found_all: Iterable[regex.Match] = rule.pattern.finditer(text)
        elif rule.hints and rule.hints.isdisjoint(words):
            continue
        else:
            found_all = candidates(rule, normal, lowered)
        subject = text if rule.raw else normal
        for found in found_all:
            match = _judge(rule, found, subject, rules, source == "material")
            current = best.get(rule.id)
            if current is None or match.weight > current.weight:
                best[rule.id] = match
            if not match.mention:
                break  # a plain instruction: the rule's full weight is already counted
    if source == "data" and (request := off_topic_request(normal)):
        best["off-topic-request"] = _off_topic(request, normal)
    matches = sorted(best.values(), key=lambda m: (-m.weight, m.start))
    return _combine(m.weight for m in matches), matches


def _off_topic(request: str, subject: str) -> InjectionMatch:
    """A loose request to an assistant about nothing else the text says, as a rule match."""
    start = subject.find(request)
    return InjectionMatch(
        rule="off-topic-request",
        category="task_hijack",
        weight=OFF_TOPIC_WEIGHT,
        text=request,
        start=start,
        end=start + len(request),
        context=request,
    )


def _judge(
    rule: InjectionRule, found: regex.Match, subject: str, rules: InjectionRules, material: bool
) -> InjectionMatch:
    """A match, discounted when it is quoted in prose that talks about attacks, or when the
    text is material the user asked about and the match does not speak to its reader."""
    start, end = found.span()
    mention = not rule.raw and is_mention(
        subject, start, end, rules.mention_cues, rules.example_cues
    )
    if material and not mention and not rule.raw:
        # Characters hidden on purpose are no string a user sends an agent to read about.
        mention = rule.category != "addressed_to_model" or is_quoted(subject, start, end)
    weight = rule.weight * rules.mention_factor if mention else rule.weight
    left, right = sentence_bounds(subject, start, end, reach=100)
    return InjectionMatch(
        rule=rule.id,
        category=rule.category,
        weight=round(weight, 6),
        text=found.group(),
        start=start,
        end=end,
        context=subject[left:right].strip(),
        mention=mention,
    )


def _combine(weights: Iterable[float]) -> float:
    """Independent evidence: each weight removes that share of the remaining doubt."""
    doubt = 1.0
    for weight in weights:
        doubt *= 1.0 - weight
    return round(1.0 - doubt, 6)
