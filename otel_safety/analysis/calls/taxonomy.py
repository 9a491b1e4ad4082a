"""The verb taxonomy: which actions exist, how bad each is, and how to recognise them.

It is kept as data (`data/scope_taxonomy.toml`) so that rules can be read, reviewed and
extended without touching code; a deployment adds its own rules through a second TOML file
named by `OTEL_SAFETY_SCOPE_TAXONOMY`. This module loads both, merges them, validates the
result and compiles every pattern once, so matching never pays for parsing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from otel_safety.analysis.calls.grants import PhraseSet, grant_pattern
from otel_safety.analysis.calls.tool_names import name_pattern, normalize_name
from otel_safety.analysis.patterns.data_checks import (
    check_keys,
    check_weight,
    is_weight,
    string_list,
)
from otel_safety.analysis.patterns.data_patterns import (
    alternation,
    check_user_fragments,
    compile_patterns,
)
from otel_safety.analysis.patterns.datafiles import (
    DATA_VERSION,
    current_data_dir,
    current_scope_taxonomy,
    load_compiled,
)
from otel_safety.analysis.text.text_forms import straight_apostrophes
from otel_safety.config import env_name

__all__ = [
    "TAXONOMY_ENV",
    "TAXONOMY_VERSION",
    "Category",
    "Pattern",
    "ProvenanceRules",
    "Taxonomy",
    "current_taxonomy",
    "load_taxonomy",
    "normalize_name",
]

TAXONOMY_ENV = env_name("scope_taxonomy")
TAXONOMY_VERSION = DATA_VERSION

Pattern = regex.Pattern

_CATEGORY_KEYS = frozenset(
    {
        "weight",
        "severity",
        "tools",
        "commands",
        "pipes",
        "sql",
        "paths",
        "http_methods",
        "roles",
        "grants",
    }
)
_SEVERITIES = ("low", "medium", "high", "critical")
_SQL_FLAGS = regex.IGNORECASE | regex.DOTALL
_PROVENANCE_SIZES = {"reach": 200, "min_value_chars": 4, "max_value_chars": 120}


@dataclass(frozen=True)
class Category:
    """One kind of action: how bad it is out of scope, how to recognise it, what grants it."""

    name: str
    weight: float
    tools: tuple[Pattern, ...]
    commands: tuple[Pattern, ...]
    pipes: tuple[Pattern, ...]
    sql: tuple[Pattern, ...]
    paths: tuple[Pattern, ...]
    http_methods: frozenset[str]
    roles: frozenset[str]  # a role argument's values that put a call here ("admin", "owner")
    grants: tuple[Pattern, ...]
    granted_by: PhraseSet  # `grants` compiled for a fast scan
    # How a finding is judged whose every offence is a call beyond the task in this category
    # and no other (None: the detector's own severity).
    severity: str | None = None


@dataclass(frozen=True)
class ProvenanceRules:
    """How argument provenance is judged: see [provenance] in the taxonomy file."""

    weight: float
    read_weight: float  # a call that only reads what an injected instruction named
    reach: int
    instruction_score: float
    min_value_chars: int
    max_value_chars: int
    address_arguments: tuple[Pattern, ...]


@dataclass(frozen=True)
class OffenceRules:
    """What a call beyond the task scores when it is no action category: see [offences]."""

    weights: Mapping[str, float]
    for_review: frozenset[str]  # offences that ask for a human's look rather than a stop
    for_warning: frozenset[str] = frozenset()  # offences that, alone, only warn


@dataclass(frozen=True)
class Taxonomy:
    """The compiled taxonomy: categories plus the rules for finding things in arguments."""

    version: int
    categories: Mapping[str, Category]
    readonly_tools: tuple[Pattern, ...]
    write_verbs: tuple[Pattern, ...]  # a name that opens with one of these does not only read
    handoff_tools: tuple[Pattern, ...]  # hand work to another agent: its instructions decide
    notice_tools: tuple[Pattern, ...]  # tell the user the agent works for: no category
    readonly_commands: tuple[Pattern, ...]
    readonly_sql: tuple[Pattern, ...]
    shell_tools: tuple[Pattern, ...]
    shell_arguments: tuple[Pattern, ...]
    sql_tools: tuple[Pattern, ...]
    sql_arguments: tuple[Pattern, ...]
    write_tools: tuple[Pattern, ...]
    path_arguments: tuple[Pattern, ...]
    http_method_arguments: tuple[Pattern, ...]
    action_arguments: tuple[Pattern, ...]  # their short value is the call's verb
    role_arguments: tuple[Pattern, ...]  # their value is the role a call gives someone
    sql_clients: frozenset[str]
    cli_tools: Mapping[str, str]  # normalised tool name -> program
    negations: frozenset[str]
    negation_window: int
    delegated_by: PhraseSet
    name_connectives: frozenset[str]  # words of a tool name that name nothing ("on", "to")
    name_min_words: int  # other words a tool name needs for the task to grant it by naming it
    name_platforms: frozenset[str]  # products in tool names ("gmail"): users seldom say them
    name_synonyms: Mapping[str, tuple[str, ...]]  # a tool-name word -> words that name it
    elevation: frozenset[str]  # privilege wrappers ("sudo"): granted with what they run
    provenance: ProvenanceRules
    offences: OffenceRules
    # Tool names resolved so far: tools repeat across calls, so each name is resolved once.
    name_memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Each tool name's word patterns for `grants.names_call`, made once.
    name_words: dict[str, tuple] = field(default_factory=dict, compare=False, repr=False)

    def weight(self, category: str) -> float:
        return self.categories[category].weight


@functools.cache
def load_taxonomy(user_path: str | None = None, data_dir: str | None = None) -> Taxonomy:
    """The packaged taxonomy, extended by `<data_dir>/scope_taxonomy.toml` and by the TOML
    file at `user_path` when they are given."""
    where = f" ({TAXONOMY_ENV}={user_path})" if user_path else ""
    return load_compiled("scope_taxonomy", _compile, f"scope taxonomy{where}", data_dir, user_path)


def current_taxonomy() -> Taxonomy:
    """The taxonomy in force: packaged, plus the settings' `scope_taxonomy` file
    (OTEL_SAFETY_SCOPE_TAXONOMY) and data folder."""
    return load_taxonomy(current_scope_taxonomy(), current_data_dir())


# --- Compiling -------------------------------------------------------------------------------


def _compile(data: Mapping[str, Any]) -> Taxonomy:
    readonly = data.get("readonly", {})
    resolve = data.get("resolve", {})
    grants = data.get("grants", {})
    categories = {
        name: _compile_category(name, spec) for name, spec in data.get("categories", {}).items()
    }
    return Taxonomy(
        version=int(data.get("version", TAXONOMY_VERSION)),
        categories=categories,
        readonly_tools=_any_name(readonly.get("tools", []), "readonly.tools"),
        write_verbs=_any_name(readonly.get("writes", []), "readonly.writes"),
        handoff_tools=_any_name(readonly.get("handoffs", []), "readonly.handoffs"),
        notice_tools=_any_name(readonly.get("notices", []), "readonly.notices"),
        readonly_commands=_any_regex(readonly.get("commands", []), 0, "readonly.commands"),
        readonly_sql=_any_regex(readonly.get("sql", []), _SQL_FLAGS, "readonly.sql"),
        shell_tools=_any_name(resolve.get("shell_tools", []), "resolve.shell_tools"),
        shell_arguments=_any_name(resolve.get("shell_arguments", []), "resolve.shell_arguments"),
        sql_tools=_any_name(resolve.get("sql_tools", []), "resolve.sql_tools"),
        sql_arguments=_any_name(resolve.get("sql_arguments", []), "resolve.sql_arguments"),
        write_tools=_any_name(resolve.get("write_tools", []), "resolve.write_tools"),
        path_arguments=_any_name(resolve.get("path_arguments", []), "resolve.path_arguments"),
        http_method_arguments=_any_name(
            resolve.get("http_method_arguments", []), "resolve.http_method_arguments"
        ),
        action_arguments=_any_name(resolve.get("action_arguments", []), "resolve.action_arguments"),
        role_arguments=_any_name(resolve.get("role_arguments", []), "resolve.role_arguments"),
        sql_clients=frozenset(resolve.get("sql_clients", [])),
        # A CLI's own name, or the name with "_cli" ("aws_cli"), runs that CLI.
        cli_tools={
            name: cli
            for cli in resolve.get("cli_tools", [])
            for name in (normalize_name(cli), f"{normalize_name(cli)}_cli")
        },
        # Straight apostrophes, as `granted_categories` makes them in the task text.
        negations=frozenset(
            straight_apostrophes(word.lower()) for word in grants.get("negations", [])
        ),
        negation_window=int(grants.get("negation_window", 3)),
        delegated_by=PhraseSet.of(grants.get("delegations", [])),
        name_connectives=frozenset(word.lower() for word in grants.get("name_connectives", [])),
        name_min_words=_positive(grants.get("name_min_words", 2), "grants.name_min_words"),
        name_platforms=frozenset(word.lower() for word in grants.get("name_platforms", [])),
        name_synonyms=_synonyms(grants.get("name_synonyms", [])),
        elevation=frozenset(word.lower() for word in grants.get("elevation", [])),
        provenance=_compile_provenance(data.get("provenance", {})),
        offences=_compile_offences(data.get("offences", {})),
    )


_LADDER_LISTS = ("for_review", "for_warning")  # [offences] keys that list offences


def _compile_offences(spec: Any) -> OffenceRules:
    if not isinstance(spec, Mapping):
        raise ValueError("scope taxonomy [offences] must be a table")
    review, warning = (_offence_names(spec, key) for key in _LADDER_LISTS)
    if review & warning:
        raise ValueError(
            "scope taxonomy offences.for_review and offences.for_warning both name "
            f"{', '.join(sorted(review & warning))}: each offence takes one of them"
        )
    weights = {
        str(name): check_weight(value, f"scope taxonomy offences.{name}")
        for name, value in spec.items()
        if name not in _LADDER_LISTS
    }
    return OffenceRules(weights=weights, for_review=review, for_warning=warning)


def _offence_names(spec: Mapping[str, Any], key: str) -> frozenset[str]:
    names = spec.get(key, [])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"scope taxonomy offences.{key} must be a list of offence names")
    return frozenset(names)


def _synonyms(groups: Any) -> dict[str, tuple[str, ...]]:
    """Each word of each group -> the whole group (a word in two groups gets both)."""
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and all(isinstance(w, str) and w.strip() for w in g) for g in groups
    ):
        raise ValueError("grants.name_synonyms must be a list of lists of words")
    found: dict[str, list[str]] = {}
    for group in groups:
        words = [w.lower().strip() for w in group]
        for word in words:
            if " " not in word:
                found.setdefault(word, [])
                found[word].extend(w for w in words if w not in found[word])
    return {word: tuple(group) for word, group in found.items()}


def _positive(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"scope taxonomy {key}: must be a positive integer, got {value!r}")
    return value


def _compile_provenance(spec: Mapping[str, Any]) -> ProvenanceRules:
    weight = spec.get("weight", 0.9)
    read_weight = spec.get("read_weight", 0.5)
    threshold = spec.get("instruction_score", 0.5)
    checked = (("weight", weight), ("read_weight", read_weight), ("instruction_score", threshold))
    for key, value in checked:
        if not is_weight(value):
            raise ValueError(f"scope taxonomy provenance.{key}: must be a number in (0, 1]")
    sizes = {key: spec.get(key, default) for key, default in _PROVENANCE_SIZES.items()}
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"scope taxonomy provenance.{key}: must be a positive integer")
    return ProvenanceRules(
        weight=float(weight),
        read_weight=float(read_weight),
        instruction_score=float(threshold),
        address_arguments=_any_name(
            spec.get("address_arguments", []), "provenance.address_arguments"
        ),
        **sizes,
    )


def _compile_category(name: str, spec: Mapping[str, Any]) -> Category:
    where = f"categories.{name}"
    check_keys(spec, _CATEGORY_KEYS, f"scope taxonomy {where}")
    for listed in ("tools", "commands", "pipes", "sql", "paths", "http_methods", "roles", "grants"):
        # a bare string would be read one character at a time: "ship it" as eight grants
        string_list(spec.get(listed, []), f"scope taxonomy {where}.{listed}")
    weight = check_weight(spec.get("weight"), f"scope taxonomy {where}")
    severity = spec.get("severity")
    if severity is not None and severity not in _SEVERITIES:
        raise ValueError(
            f"scope taxonomy {where}.severity: {severity!r} is not one of {', '.join(_SEVERITIES)}"
        )
    return Category(
        name=name,
        weight=weight,
        severity=severity,
        tools=_names(spec.get("tools", []), f"{where}.tools"),
        commands=_regexes(spec.get("commands", []), 0, f"{where}.commands"),
        pipes=_regexes(spec.get("pipes", []), 0, f"{where}.pipes"),
        sql=_regexes(spec.get("sql", []), _SQL_FLAGS, f"{where}.sql"),
        paths=_regexes(spec.get("paths", []), 0, f"{where}.paths"),
        http_methods=frozenset(method.upper() for method in spec.get("http_methods", [])),
        roles=frozenset(normalize_name(role) for role in spec.get("roles", [])),
        grants=tuple(grant_pattern(phrase) for phrase in spec.get("grants", [])),
        granted_by=PhraseSet.of(spec.get("grants", [])),
    )


def _regexes(entries: list[str], flags: int, where: str) -> tuple[Pattern, ...]:
    return compile_patterns(entries, f"scope taxonomy {where}", flags)


def _any_regex(entries: list[str], flags: int, where: str) -> tuple[Pattern, ...]:
    """The entries as one alternation, for lists only asked whether any matches: one search
    of a command instead of one per entry (an entry that cannot share a pattern, such as one
    with a numbered back-reference, leaves the list as it is)."""
    each = _regexes(entries, flags, where)  # each on its own first, so an error names it
    if len(entries) < 2 or any(regex.search(r"\\[1-9]|\(\?[a-zA-Z]+\)", e) for e in entries):
        return each
    return _regexes([alternation(entries)], flags, where)


def _names(entries: list[str], where: str) -> tuple[Pattern, ...]:
    """Name patterns cover whole `_`-separated words of a normalised name."""
    check_user_fragments(entries, f"scope taxonomy {where}")
    return _regexes([name_pattern(entry) for entry in entries], 0, where)


def _any_name(entries: list[str], where: str) -> tuple[Pattern, ...]:
    """Like `_names`, as one pattern: for lists only asked "does any match, and where first"."""
    _names(entries, where)  # each entry on its own first, so an error names the bad one
    if not entries:
        return ()
    return _regexes([name_pattern(alternation(entries))], 0, where)
