"""The claim-to-evidence table (`data/deception.toml`), checked and compiled.

For each kind of action: the words that claim it (verbs, objects, whole statements) and what
in a trace shows it was done (tool names, shell commands, tool results). Alongside, the
grammar of a claim (subjects, modals, hedges, conditions), compiled into the patterns
`claims` reads an answer with, plus cheap ones that let it skip clauses that claim nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from otel_safety.analysis.calls.tool_names import name_pattern
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.patterns.data_checks import check_keys, check_weight
from otel_safety.analysis.patterns.data_patterns import (
    alternation,
    any_of,
    checked_alternation,
    compile_pattern,
)
from otel_safety.analysis.patterns.datafiles import current_data_dir, load_compiled
from otel_safety.model import Severity

__all__ = ["FLAGS", "Action", "ClaimRules", "current_rules", "load_rules"]

FLAGS = regex.IGNORECASE
# Not inside a word, a number or a path: where an object named first may begin.
_TOKEN_START = r"(?<![\w./,-])"
# "is", "are" or a clitic "'s" before a past participle: a state ("the rent is paid").
_STATE = r"(?:[ \t]+(?:is|are)|['\u2019]s)[ \t]+(?:now[ \t]+|all[ \t]+)?"
# ... that ends its clause, so it reports the deed rather than a habit or a plan.
_STATE_END = r"(?:[ \t]*[.!,;\u2705\u2714]|[ \t]*$)"
_ACTION_KEYS = frozenset(
    {
        "weight",
        "verbs",
        "perfect_verbs",
        "bare_verbs",
        "objects",
        "statements",
        "tools",
        "commands",
        "results",
        "refuted_by",
        "arguments",
        "any_command",
        "redirects",
        "content",
        "named_target",
    }
)


@dataclass(frozen=True)
class Action:
    """One kind of action: how a claim of it is worded and what in a trace shows it."""

    name: str
    weight: float
    anchored: regex.Pattern | None  # verb (+ object), matched where a claim may begin
    anchored_perfect: regex.Pattern | None  # the same after "have", with participles
    passives: tuple[regex.Pattern, ...]
    passive_verb: regex.Pattern | None  # its verbs, tried where a passive phrase ends
    statements: tuple[regex.Pattern, ...]
    tools: tuple[regex.Pattern, ...]
    commands: tuple[regex.Pattern, ...]
    results: tuple[regex.Pattern, ...]
    arguments: tuple[regex.Pattern, ...]  # text in a call's arguments (a SQL DROP, say)
    any_command: bool
    redirects: bool
    content: bool  # makes things an answer can contain, so `in_answer` wording voids a claim
    # What the result of the call that did it says when a claim of success is false ("3
    # failed" under "all tests pass"); read only for claims worded as one of `statements`.
    refuted_by: tuple[regex.Pattern, ...] = ()
    # The deed acts on something it names ("Deleted acme-assets-2023"): a call that acts on
    # that name backs the claim whatever its tool is called (`claim_evidence.named_by_a_call`).
    named_target: bool = False
    # A result that reports the deed done in the action's own words ("Your membership has
    # been cancelled", `"status": "booked"`): a page or service saying so backs the claim,
    # whatever clicks or calls got there.
    reports: regex.Pattern | None = None


@dataclass(frozen=True)
class ClaimRules:
    """The compiled claim-to-evidence table and the grammar that finds claims."""

    actions: tuple[Action, ...]
    subject: regex.Pattern  # "I", "we've", "I have also" ...
    modal: regex.Pattern  # "will", "did not" ... right after a subject
    coordinator: regex.Pattern  # ", and then" ...
    adverbs: regex.Pattern  # "successfully", "just also" ...
    starts_with_verb: regex.Pattern  # any action's verb, where a clause opens
    any_verb: regex.Pattern  # any claimed verb: a cheap test before trying each action
    first_word: regex.Pattern | None  # a word that can begin a claimed verb (None: any can)
    seen_words: dict[str, bool]  # first_word's verdict per word, so each is tested once
    any_passive: regex.Pattern  # "has been" / "was successfully" + a verb: finds passives
    any_statement: regex.Pattern  # any action's statements, likewise
    label: regex.Pattern  # what makes an opening verb a label: "Scheduled for", "Created by:"
    negator: regex.Pattern
    hedge: regex.Pattern
    condition: regex.Pattern
    in_answer: regex.Pattern
    hedge_factor: float
    # A call that failed and was never made good, under an answer that says nothing of any
    # failure: the score, and the words by which an answer owns up to a failure.
    silent_failure_weight: float
    acknowledged: regex.Pattern
    # The words by which an answer owns up to part of a call's work failing: a bare "not"
    # does not ("we aren't affected"), as the part left undone is what it must name.
    partly_acknowledged: regex.Pattern
    # An answer that says "no <thing>" where a result of the run reports the thing there
    # (`result_denials`): the score.
    denied_result_weight: float = 0.0
    # How a finding is judged whose every claim only lacks a call to show it (no call of it
    # failed, no result contradicts it); None: by the detector's ladder.
    unbacked_severity: Severity | None = None


def current_rules() -> ClaimRules:
    """The table in force: packaged, extended by `$OTEL_SAFETY_DATA_DIR/deception.toml`."""
    return load_rules(current_data_dir())


@functools.cache
def load_rules(data_dir: str | None = None) -> ClaimRules:
    """The packaged table, extended by `<data_dir>/deception.toml` when there is one."""
    return load_compiled("deception", _compile, "deception data", data_dir)


def _compile(data: Mapping[str, Any]) -> ClaimRules:
    language = data.get("language", {})
    silent = data.get("silent_failure", {})
    denied = data.get("denied_result", {})
    adverbs = _alternation(language.get("adverbs", []), "language.adverbs")
    adverb_run = rf"(?:(?:{adverbs})\s+)*" if adverbs else ""
    window = int(language.get("object_window", 4))
    actions = tuple(
        _compile_action(name, spec, adverb_run, window)
        for name, spec in data.get("actions", {}).items()
    )
    every_verb = _alternation(
        [
            *language.get("openers", []),
            *(
                verb
                for spec in data.get("actions", {}).values()
                for verb in (*spec.get("verbs", []), *spec.get("bare_verbs", []))
            ),
        ],
        "verbs",
    )
    all_verbs = [
        verb
        for spec in data.get("actions", {}).values()
        for key in ("verbs", "perfect_verbs", "bare_verbs")
        for verb in spec.get(key, [])
    ]
    claimed = _alternation(all_verbs, "verbs")
    statements = [
        p for spec in data.get("actions", {}).values() for p in spec.get("statements", [])
    ]
    perfect_passive = rf"(?:has|have)\s+{adverb_run}been\s+{adverb_run}"
    return ClaimRules(
        actions=actions,
        subject=_regex(
            rf"\b(?:I|we)(?P<have>\s+(?:have|had)|['\u2019]ve)?\s+{adverb_run}", "subject"
        ),
        coordinator=_regex(
            rf"(?:,\s*|\s+)(?:and(?:\s+then)?|then|&|as\s+well\s+as)\s+{adverb_run}", "coordinator"
        ),
        adverbs=_regex(adverb_run, "language.adverbs"),
        modal=_regex(any_of(language.get("modals", [])), "language.modals"),
        starts_with_verb=_regex(rf"(?:{every_verb or '(?!)'})(?!\w)", "verbs"),
        label=_regex(rf"\s*(?:{any_of(language.get('labels', []))})", "language.labels"),
        any_verb=_regex(rf"(?:{claimed or '(?!)'})(?!\w)", "verbs"),
        first_word=_first_words(all_verbs),
        seen_words={},
        any_passive=_regex(
            rf"(?:\b{perfect_passive}|\b(?:was|were|is|are)\s+successfully\s+|{_STATE})"
            rf"(?P<verb>(?:{claimed or '(?!)'}))(?!\w)",
            "verbs",
        ),
        any_statement=_regex(any_of(statements), "statements"),
        negator=_regex(any_of(language.get("negators", [])), "language.negators"),
        hedge=_regex(any_of(language.get("hedges", [])), "language.hedges"),
        condition=_regex(any_of(language.get("conditions", [])), "language.conditions"),
        in_answer=_regex(any_of(language.get("in_answer", [])), "language.in_answer"),
        hedge_factor=float(language.get("hedge_factor", 0.3)),
        silent_failure_weight=float(silent.get("weight", 0.0)),
        acknowledged=_regex(any_of(silent.get("acknowledged", [])), "silent_failure.acknowledged"),
        partly_acknowledged=_regex(
            any_of(silent.get("partly_acknowledged", [])), "silent_failure.partly_acknowledged"
        ),
        denied_result_weight=(
            check_weight(denied["weight"], "denied_result") if "weight" in denied else 0.0
        ),
        unbacked_severity=_severity(data.get("unbacked_severity"), "unbacked_severity"),
    )


def _severity(value: Any, where: str) -> Severity | None:
    if value is None:
        return None
    try:
        return Severity(value)
    except ValueError:
        known = ", ".join(repr(s.value) for s in Severity)
        raise ValueError(f"deception data: {where} = {value!r} is not one of {known}") from None


def _compile_action(name: str, spec: Mapping[str, Any], adverb_run: str, window: int) -> Action:
    where = f"actions.{name}"
    check_keys(spec, _ACTION_KEYS, where)
    weight = check_weight(spec.get("weight"), where)
    verbs = _alternation(spec.get("verbs", []), f"{where}.verbs")
    perfect = _alternation(
        [*spec.get("verbs", []), *spec.get("perfect_verbs", [])], f"{where}.perfect_verbs"
    )
    bare = _alternation(spec.get("bare_verbs", []), f"{where}.bare_verbs")
    objects = _alternation(spec.get("objects", []), f"{where}.objects")
    if not objects:  # with nothing to be about, every verb claims on its own
        bare = "|".join(part for part in (bare, perfect) if part)
        verbs = perfect = ""
    # The gap starts with a non-word character, so a verb before it ends at a word's end
    # without a lookahead (which RE2 could not run).
    gap = rf"(?P<gap>(?:\W+\w[\w'\u2019-]*){{0,{window}}}?)\W+"

    def anchored(with_object: str) -> regex.Pattern | None:
        forms = [f"(?:{bare})(?!\\w)"] if bare else []
        if with_object:
            forms.append(f"(?:{with_object}){gap}(?:{objects})(?![\\w-])")
        return _regex("|".join(forms), where) if forms else None

    passives = []
    been = rf"(?:has|have)\s+{adverb_run}been\s+{adverb_run}"
    done = r"(?:was|were|is|are)\s+successfully\s+"
    reports = None
    if bare:
        passive = rf"\b(?:{been}|{done})(?:{bare})(?!\w)"
        passives.append(_regex(passive, where))
        status = rf"\b(?:status|state)[\"']?\s*[:=]\s*[\"']?(?:{bare})(?!\w)"
        reports = _regex(f"{passive}|{status}", where)
    if objects and perfect:
        # The object heads the subject ("the invitation email has been sent") or follows the
        # verb ("has been added to the file"); a subject runs no further than a conjunction.
        words = rf"(?:[^\s\w]*[ \t]+(?!(?:and|but|or|then|so)\b)[^\s;:]+){{0,{window}}}?"
        # The object starts where a token does: started inside a run of digits or a path,
        # every position of the run would be tried in turn, the square of its length.
        passives.append(
            _regex(
                rf"{_TOKEN_START}(?:{objects})(?![\w-]){words}"
                rf"[^\s\w]*[ \t]+(?:{been}|{done})(?:{perfect})(?!\w)",
                where,
            )
        )
        passives.append(
            _regex(rf"\b(?:{been}|{done})(?:{perfect}){gap}(?:{objects})(?![\w-])", where)
        )
        # A state that reports the deed where the clause ends: "the rent is paid.", "Rent's
        # paid ✅" (not "the report is sent every Monday", a habit).
        passives.append(
            _regex(
                rf"{_TOKEN_START}(?:{objects})(?![\w-]){words}{_STATE}(?:{perfect}){_STATE_END}",
                where,
            )
        )
    return Action(
        name=name,
        weight=weight,
        anchored=anchored(verbs),
        anchored_perfect=anchored(perfect),
        passives=tuple(passives),
        passive_verb=(
            _regex(rf"(?:{'|'.join(p for p in (bare, perfect) if p)})(?!\w)", where)
            if passives
            else None
        ),
        statements=tuple(_regex(p, f"{where}.statements") for p in spec.get("statements", [])),
        tools=tuple(
            _regex(name_pattern(entry), f"{where}.tools", 0) for entry in spec.get("tools", [])
        ),
        commands=tuple(_regex(p, f"{where}.commands", 0) for p in spec.get("commands", [])),
        results=tuple(
            _regex(p, f"{where}.results", FLAGS | regex.MULTILINE) for p in spec.get("results", [])
        ),
        arguments=tuple(_regex(p, f"{where}.arguments", FLAGS) for p in spec.get("arguments", [])),
        any_command=bool(spec.get("any_command", False)),
        redirects=bool(spec.get("redirects", False)),
        content=bool(spec.get("content", False)),
        named_target=bool(spec.get("named_target", False)),
        reports=reports,
        refuted_by=tuple(
            _regex(p, f"{where}.refuted_by", FLAGS | regex.MULTILINE)
            for p in spec.get("refuted_by", [])
        ),
    )


def _first_words(verbs: Sequence[str]) -> regex.Pattern | None:
    """The first word of every verb ("rolled" of 'rolled\\s+out'), or None when a verb cannot
    be cut there safely (then every clause is read in full)."""
    heads = []
    for verb in verbs:
        head = verb.split("\\s", 1)[0]
        try:
            compiled(head)  # checks it parses (kept for the next process)
        except regex.error:
            return None
        heads.append(head)
    return _regex(alternation(heads), "verbs") if heads else None


def _alternation(entries: Sequence[str], where: str) -> str:
    return checked_alternation(entries, where, FLAGS)


def _regex(pattern: str, where: str, flags: int = FLAGS) -> regex.Pattern:
    return compile_pattern(pattern, where, flags)
