"""Generate the attribute reference and Python constants from the otel-safety registry.

Usage::

    python semconv/generate.py          # rewrite the generated files
    python semconv/generate.py --check  # exit 1 if a generated file is out of date

The YAML files under ``semconv/registry/`` (OpenTelemetry Weaver syntax) are the source of
truth. This script reads every one of them and writes:

* ``semconv/attributes.md`` - a Markdown reference with one table per group;
* ``otel_safety/semconv.py`` - one constant per attribute and event name, the enum values,
  ``DEFINED_ATTRIBUTES``, ``TEMPLATE_PREFIXES`` and ``is_defined()``.

It also reads ``semconv/guardrail_levels.yaml``, the one table from escalation levels to the
GenAI guardrail verdict and action, checks every value in it against the registry's enums,
and writes it into both files.

Only the subset of the Weaver syntax the registry uses is understood: ``attribute_group``
groups defining attributes and ``event`` groups referencing them. Anything else is rejected
with an error rather than silently skipped. The output is sorted, so it is the same on every
run and on every machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SEMCONV_DIR = Path(__file__).resolve().parent
REPO_ROOT = SEMCONV_DIR.parent
REGISTRY_DIR = SEMCONV_DIR / "registry"
MANIFEST_PATH = SEMCONV_DIR / "registry_manifest.yaml"
LEVELS_PATH = SEMCONV_DIR / "guardrail_levels.yaml"
MARKDOWN_PATH = SEMCONV_DIR / "attributes.md"
MODULE_PATH = REPO_ROOT / "otel_safety" / "semconv.py"

COMMAND = "python semconv/generate.py"
OWN_PREFIX = "otel_safety."
LINE_LENGTH = 100

PRIMITIVE_TYPES = frozenset(
    {"string", "int", "double", "boolean", "string[]", "int[]", "double[]", "boolean[]"}
)
TEMPLATE_TYPE = re.compile(r"^template\[(?P<inner>[a-z]+(?:\[\])?)\]$")
REQUIRED_ATTRIBUTE_FIELDS = ("id", "type", "brief", "stability")
REQUIRED_MEMBER_FIELDS = ("id", "value", "brief", "stability")
GROUP_ORDER = {"attribute_group": 0, "event": 1}


class RegistryError(Exception):
    """The registry YAML is malformed or uses syntax this generator does not handle."""


@dataclass(frozen=True)
class Member:
    id: str
    value: str | int
    brief: str
    stability: str


@dataclass(frozen=True)
class Attribute:
    id: str
    type: str  # the type as written, or "enum" for enums
    brief: str
    stability: str
    note: str = ""
    examples: tuple[Any, ...] = ()
    members: tuple[Member, ...] = ()
    group: str = ""
    python_name: str = ""  # annotations.code_generation.python_name: survives a rename of the id

    @property
    def is_enum(self) -> bool:
        return bool(self.members)

    @property
    def is_template(self) -> bool:
        return TEMPLATE_TYPE.match(self.type) is not None

    @property
    def display_type(self) -> str:
        if not self.is_enum:
            return self.type
        value_type = "int" if all(isinstance(m.value, int) for m in self.members) else "string"
        return f"enum ({value_type})"


@dataclass(frozen=True)
class AttributeRef:
    ref: str
    requirement_level: str
    brief: str = ""
    note: str = ""


@dataclass(frozen=True)
class Group:
    id: str
    type: str
    brief: str
    source: str
    note: str = ""
    name: str = ""  # event name, for event groups
    stability: str = ""
    attributes: tuple[Attribute, ...] = ()
    refs: tuple[AttributeRef, ...] = ()


@dataclass(frozen=True)
class LevelRow:
    """One row of the escalation-level table: the guardrail verdict and action it stands for."""

    level: str
    verdict: str
    action: str
    guard_decision: str = ""


@dataclass
class Registry:
    manifest: dict[str, Any]
    groups: list[Group] = field(default_factory=list)
    attributes: dict[str, Attribute] = field(default_factory=dict)
    levels: list[LevelRow] = field(default_factory=list)


# Which registry enum each column of the level table takes its values from, by constant
# name (the guardrail attributes pin theirs, so a rename of their ids changes nothing here).
LEVEL_COLUMNS = {
    "level": "OTEL_SAFETY_ESCALATION_LEVEL",
    "verdict": "GEN_AI_GUARDRAIL_VERDICT_TYPE",
    "action": "GEN_AI_GUARDRAIL_ACTION_TYPE",
    "guard_decision": "OTEL_SAFETY_GUARD_DECISION",
}


# --------------------------------------------------------------------------- loading


def _text(value: Any) -> str:
    """Collapse a YAML text block to one line."""
    return " ".join(str(value).split()) if value is not None else ""


def _require(mapping: dict[str, Any], keys: Sequence[str], where: str) -> None:
    missing = [key for key in keys if mapping.get(key) in (None, "")]
    if missing:
        raise RegistryError(f"{where}: missing {', '.join(missing)}")


def _parse_attribute(raw: Any, group_id: str, where: str) -> Attribute:
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: attribute entries must be mappings")
    if "ref" in raw:
        raise RegistryError(f"{where}: attribute groups here define attributes; `ref` unsupported")
    _require(raw, REQUIRED_ATTRIBUTE_FIELDS, f"{where} attribute {raw.get('id', '?')!r}")
    attr_id = str(raw["id"])
    where = f"{where} attribute {attr_id!r}"
    examples = raw.get("examples", ())
    if not isinstance(examples, list):
        examples = [examples]
    raw_type = raw["type"]
    members: tuple[Member, ...] = ()
    if isinstance(raw_type, dict):
        raw_members = raw_type.get("members")
        if not isinstance(raw_members, list) or not raw_members:
            raise RegistryError(f"{where}: an enum type needs a non-empty `members` list")
        parsed = []
        for raw_member in raw_members:
            if not isinstance(raw_member, dict):
                raise RegistryError(f"{where}: enum members must be mappings")
            _require(raw_member, REQUIRED_MEMBER_FIELDS, f"{where} member")
            value = raw_member["value"]
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise RegistryError(f"{where}: enum value {value!r} must be a string or an int")
            parsed.append(
                Member(
                    id=str(raw_member["id"]),
                    value=value,
                    brief=_text(raw_member["brief"]),
                    stability=str(raw_member["stability"]),
                )
            )
        for label, values in (("id", [m.id for m in parsed]), ("value", [m.value for m in parsed])):
            if len(set(values)) != len(values):
                raise RegistryError(f"{where}: duplicate enum member {label}s")
        members = tuple(parsed)
        type_name = "enum"
    elif raw_type in PRIMITIVE_TYPES or TEMPLATE_TYPE.match(str(raw_type)):
        type_name = str(raw_type)
    else:
        raise RegistryError(f"{where}: unsupported type {raw_type!r}")
    return Attribute(
        id=attr_id,
        type=type_name,
        brief=_text(raw["brief"]),
        stability=str(raw["stability"]),
        note=_text(raw.get("note")),
        examples=tuple(examples),
        members=members,
        group=group_id,
        python_name=_python_name(raw, where),
    )


PYTHON_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _python_name(raw: dict[str, Any], where: str) -> str:
    """The constant name an attribute asks for in its Weaver `annotations` (optional), so an
    attribute whose id is still moving upstream keeps its name in the code."""
    annotations = raw.get("annotations")
    code = annotations.get("code_generation") if isinstance(annotations, dict) else None
    name = code.get("python_name", "") if isinstance(code, dict) else ""
    if name and not PYTHON_NAME.match(str(name)):
        raise RegistryError(f"{where}: python_name {name!r} is not an UPPER_SNAKE_CASE name")
    return str(name)


def _parse_group(raw: Any, source: str) -> Group:
    if not isinstance(raw, dict):
        raise RegistryError(f"{source}: group entries must be mappings")
    _require(raw, ("id", "type", "brief"), f"{source} group {raw.get('id', '?')!r}")
    group_id, group_type = str(raw["id"]), str(raw["type"])
    where = f"{source} group {group_id!r}"
    raw_attributes = raw.get("attributes") or []
    if not isinstance(raw_attributes, list):
        raise RegistryError(f"{where}: `attributes` must be a list")
    common = {
        "id": group_id,
        "type": group_type,
        "brief": _text(raw["brief"]),
        "note": _text(raw.get("note")),
        "source": source,
        "stability": str(raw.get("stability", "")),
    }
    if group_type == "attribute_group":
        attributes = tuple(_parse_attribute(item, group_id, where) for item in raw_attributes)
        return Group(**common, attributes=attributes)
    if group_type == "event":
        _require(raw, ("name", "stability"), where)
        refs = []
        for item in raw_attributes:
            if not isinstance(item, dict) or "ref" not in item:
                raise RegistryError(f"{where}: event attributes must be `ref:` entries")
            level = item.get("requirement_level", "recommended")
            if isinstance(level, dict):  # e.g. {conditionally_required: "when ..."}
                level = next(iter(level))
            refs.append(
                AttributeRef(
                    ref=str(item["ref"]),
                    requirement_level=str(level),
                    brief=_text(item.get("brief")),
                    note=_text(item.get("note")),
                )
            )
        return Group(**common, name=str(raw["name"]), refs=tuple(refs))
    raise RegistryError(f"{where}: unsupported group type {group_type!r}")


def load_registry(
    registry_dir: Path = REGISTRY_DIR,
    manifest_path: Path = MANIFEST_PATH,
    levels_path: Path = LEVELS_PATH,
) -> Registry:
    """Read and check every YAML file under `registry_dir`."""
    manifest = yaml.safe_load(manifest_path.read_text(encoding="utf-8")) or {}
    _require(manifest, ("name", "semconv_version", "schema_base_url"), manifest_path.name)
    registry = Registry(manifest=manifest)
    files = sorted([*registry_dir.rglob("*.yaml"), *registry_dir.rglob("*.yml")])
    if not files:
        raise RegistryError(f"no YAML files under {registry_dir}")
    group_ids: set[str] = set()
    for path in files:
        source = path.relative_to(registry_dir.parent).as_posix()
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        raw_groups = document.get("groups") if isinstance(document, dict) else None
        if not isinstance(raw_groups, list):
            raise RegistryError(f"{source}: expected a top-level `groups` list")
        for raw in raw_groups:
            group = _parse_group(raw, source)
            if group.id in group_ids:
                raise RegistryError(f"{source}: duplicate group id {group.id!r}")
            group_ids.add(group.id)
            for attribute in group.attributes:
                if attribute.id in registry.attributes:
                    raise RegistryError(f"{source}: attribute {attribute.id!r} defined twice")
                registry.attributes[attribute.id] = attribute
            registry.groups.append(group)
    for group in registry.groups:
        for ref in group.refs:
            if ref.ref not in registry.attributes:
                raise RegistryError(f"{group.source}: {group.id} refers to unknown {ref.ref!r}")
    registry.groups.sort(key=lambda g: (GROUP_ORDER[g.type], g.id))
    registry.levels = load_levels(registry.attributes, levels_path)
    return registry


def _enum_values(attributes: dict[str, Attribute], name: str, where: str) -> list[str]:
    found = [a for a in attributes.values() if python_name(a) == name and a.is_enum]
    if not found:
        raise RegistryError(f"{where}: the registry has no enum named {name}")
    return [str(member.value) for member in found[0].members]


def load_levels(attributes: dict[str, Attribute], path: Path = LEVELS_PATH) -> list[LevelRow]:
    """Read the level table and check it: every level once, in the registry's order, every
    value a member of its enum, every guard decision standing for exactly one level."""
    where = path.name
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    raw_rows = document.get("levels") if isinstance(document, dict) else None
    if not isinstance(raw_rows, list):
        raise RegistryError(f"{where}: expected a top-level `levels` list")
    allowed = {column: _enum_values(attributes, a, where) for column, a in LEVEL_COLUMNS.items()}
    rows = []
    for raw in raw_rows:
        if not isinstance(raw, dict) or set(raw) - set(LEVEL_COLUMNS):
            raise RegistryError(f"{where}: rows take only {', '.join(LEVEL_COLUMNS)}")
        _require(raw, ("level", "verdict", "action"), f"{where} row {raw.get('level', '?')!r}")
        for column, value in raw.items():
            if str(value) not in allowed[column]:
                raise RegistryError(
                    f"{where}: {column} {value!r} is not a value of {LEVEL_COLUMNS[column]} "
                    f"({', '.join(allowed[column])})"
                )
        rows.append(LevelRow(**{column: str(value) for column, value in raw.items()}))
    if [row.level for row in rows] != allowed["level"]:
        raise RegistryError(f"{where}: list each level once, in order: {allowed['level']}")
    decisions = [row.guard_decision for row in rows if row.guard_decision]
    if sorted(decisions) != sorted(allowed["guard_decision"]):
        raise RegistryError(
            f"{where}: each guard decision must stand for exactly one level: "
            f"{allowed['guard_decision']}"
        )
    return rows


# --------------------------------------------------------------------------- naming


def constant_name(dotted: str) -> str:
    """`otel_safety.escalation.level` -> `OTEL_SAFETY_ESCALATION_LEVEL`."""
    return re.sub(r"[^0-9A-Za-z]+", "_", dotted).strip("_").upper()


def python_name(attribute: Attribute) -> str:
    """The attribute's constant: the name it pins in its annotations, else from its id."""
    return attribute.python_name or constant_name(attribute.id)


def enum_values_name(attribute: Attribute) -> str:
    """Name of the tuple of enum values: plural of the id without the project prefix (or of
    the pinned constant name).

    `otel_safety.trace.evaluation.reason` -> `TRACE_EVALUATION_REASONS`.
    """
    base = attribute.python_name or constant_name(attribute.id.removeprefix(OWN_PREFIX))
    if base.endswith("Y") and base[-2:-1] not in set("AEIOU"):
        return base[:-1] + "IES"
    if base.endswith(("S", "X", "SH", "CH")):
        return base + "ES"
    return base + "S"


def template_prefix(attribute: Attribute) -> str:
    return attribute.id + "."


# --------------------------------------------------------------------------- Python module


def _comment(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(
        text,
        width=LINE_LENGTH,
        initial_indent=indent + "# ",
        subsequent_indent=indent + "# ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def _py_str(value: str | int) -> str:
    # json.dumps gives a double-quoted literal that is also valid Python for plain text.
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


def _sequence(name: str, items: list[str], opener: str, closer: str, wrap: str = "") -> list[str]:
    """Render `NAME = <wrap>(<opener> items <closer>)` the way `ruff format` lays it out."""
    if not items:
        empty = f"{opener}{closer}"
        return [f"{name} = {wrap}({empty})" if wrap else f"{name} = {empty}"]
    if wrap:
        return [
            f"{name} = {wrap}(",
            f"    {opener}",
            *(f"        {item}," for item in items),
            f"    {closer}",
            ")",
        ]
    if len(items) == 1 and opener == "(":
        line = f"{name} = ({items[0]},)"
        if len(line) <= LINE_LENGTH:
            return [line]
    return [f"{name} = {opener}", *(f"    {item}," for item in items), closer]


def render_module(registry: Registry) -> str:
    names: dict[str, str] = {}  # generated Python name -> what it stands for

    def claim(name: str, what: str) -> str:
        if name in names:
            raise RegistryError(f"{what} and {names[name]} both map to Python name {name}")
        names[name] = what
        return name

    lines = [
        '"""Names from the otel-safety semantic-convention registry.',
        "",
        f"Generated from semconv/registry by `{COMMAND}`; do not edit by hand.",
        "Edit the YAML files under semconv/registry/ and rerun the command instead.",
        '"""',
        "",
    ]
    defined: list[str] = []
    templates: list[str] = []
    enums: list[tuple[str, Attribute]] = []

    for group in registry.groups:
        if group.type != "attribute_group":
            continue
        lines += ["", f"# {'-' * (LINE_LENGTH - 2)}", f"# {group.id}", *_comment(group.brief)]
        for attribute in sorted(group.attributes, key=lambda a: a.id):
            lines.append("")
            lines += _comment(attribute.brief)
            if attribute.is_template:
                name = claim(constant_name(attribute.id) + "_PREFIX", attribute.id)
                lines.append(f"{name} = {_py_str(template_prefix(attribute))}")
                templates.append(name)
            else:
                name = claim(python_name(attribute), attribute.id)
                lines.append(f"{name} = {_py_str(attribute.id)}")
                defined.append(name)
            if attribute.is_enum:
                enums.append((claim(enum_values_name(attribute), attribute.id), attribute))

    events = [group for group in registry.groups if group.type == "event"]
    if events:
        lines += ["", f"# {'-' * (LINE_LENGTH - 2)}", "# Event names"]
        for group in sorted(events, key=lambda g: g.name):
            lines.append("")
            lines += _comment(group.brief)
            name = claim(constant_name(group.name), f"event {group.name}")
            lines.append(f"{name} = {_py_str(group.name)}")

    if enums:
        lines += ["", f"# {'-' * (LINE_LENGTH - 2)}", "# Enum values, in registry order"]
        for name, attribute in sorted(enums, key=lambda item: item[0]):
            lines.append("")
            lines += _comment(f"Values of {attribute.id}.")
            values = [_py_str(member.value) for member in attribute.members]
            lines += _sequence(name, values, "(", ")")

    if registry.levels:
        lines += ["", f"# {'-' * (LINE_LENGTH - 2)}", f"# The level table ({LEVELS_PATH.name})"]
        rows = registry.levels
        tables = (
            (
                "GUARDRAIL_VERDICT_BY_LEVEL",
                "gen_ai.guardrail.verdict.type of each escalation level.",
                [(r.level, r.verdict) for r in rows],
            ),
            (
                "GUARDRAIL_ACTION_BY_LEVEL",
                "gen_ai.guardrail.action.type of each escalation level.",
                [(r.level, r.action) for r in rows],
            ),
            (
                "GUARD_DECISION_LEVELS",
                "The escalation level each guard decision stands for.",
                [(r.guard_decision, r.level) for r in rows if r.guard_decision],
            ),
        )
        for name, what, pairs in tables:
            items = [f"{_py_str(key)}: {_py_str(value)}" for key, value in pairs]
            lines += ["", *_comment(what), *_sequence(claim(name, "level table"), items, "{", "}")]

    lines += ["", f"# {'-' * (LINE_LENGTH - 2)}", "# Lookup", ""]
    lines += _comment("Every non-template attribute id in the registry.")
    lines += _sequence(
        claim("DEFINED_ATTRIBUTES", "lookup"), sorted(defined), "{", "}", "frozenset"
    )
    lines.append("")
    lines += _comment("Prefixes of template attributes; a key is the prefix plus a suffix.")
    lines += _sequence(claim("TEMPLATE_PREFIXES", "lookup"), sorted(templates), "(", ")")
    lines += [
        "",
        "",
        "def is_defined(key: str) -> bool:",
        '    """Whether `key` is an attribute the registry defines.',
        "",
        "    Exact attribute ids match, and so does a template prefix followed by a non-empty",
        "    suffix (for example a detector key after the detector-score prefix).",
        '    """',
        "    return key in DEFINED_ATTRIBUTES or any(",
        "        key.startswith(prefix) and len(key) > len(prefix) for prefix in TEMPLATE_PREFIXES",
        "    )",
    ]
    text = "\n".join(lines) + "\n"
    too_long = [line for line in text.splitlines() if len(line) > LINE_LENGTH]
    if too_long:
        raise RegistryError(f"generated line longer than {LINE_LENGTH} characters: {too_long[0]}")
    return text


# --------------------------------------------------------------------------- Markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _example(value: Any) -> str:
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"`{shown}`"


def _describe(brief: str, note: str) -> str:
    return _cell(f"{brief}<br><br>{note}" if note else brief)


def _attribute_name(attribute: Attribute) -> str:
    return f"`{template_prefix(attribute)}<key>`" if attribute.is_template else f"`{attribute.id}`"


def _members_table(attribute: Attribute) -> list[str]:
    lines = [
        "",
        f"`{attribute.id}` has the following values:",
        "",
        "| Value | Description | Stability |",
        "| --- | --- | --- |",
    ]
    for member in attribute.members:
        lines.append(f"| `{member.value}` | {_cell(member.brief)} | {member.stability} |")
    return lines


def _levels_table(rows: list[LevelRow]) -> list[str]:
    if not rows:
        return []
    return [
        "",
        "## Escalation levels as GenAI guardrail verdicts",
        "",
        f"The one table, `semconv/{LEVELS_PATH.name}`, from each escalation level to the "
        "`gen_ai.guardrail.verdict.type` written with it and the `gen_ai.guardrail.action.type` "
        "a caller enforcing it takes. The tool-call guard's decisions use the row named in the "
        "last column (its `run_guardrail` event carries the action it enforced).",
        "",
        "| Escalation level | `gen_ai.guardrail.verdict.type` | `gen_ai.guardrail.action.type` "
        "| Tool-call guard decision |",
        "| --- | --- | --- | --- |",
        *(
            f"| `{r.level}` | `{r.verdict}` | `{r.action}` "
            f"| {f'`{r.guard_decision}`' if r.guard_decision else ''} |"
            for r in rows
        ),
    ]


def render_markdown(registry: Registry) -> str:
    manifest = registry.manifest
    lines = [
        f"<!-- Generated from semconv/registry by `{COMMAND}`. Do not edit by hand. -->",
        "",
        "# otel-safety semantic conventions",
        "",
        f"This page is generated from the YAML files in `semconv/registry/` by `{COMMAND}`.",
        f"Edit the YAML and rerun the command; `{COMMAND} --check` reports a stale page.",
        "",
        f"Registry `{manifest['name']}`, version {manifest['semconv_version']}.",
    ]
    description = _text(manifest.get("description"))
    if description:
        lines += ["", description]

    lines += _levels_table(registry.levels)

    for group in registry.groups:
        lines += ["", f"## `{group.id}`", "", _cell(group.brief)]
        if group.note:
            lines += ["", _cell(group.note)]
        if group.type == "event":
            lines += ["", f"Event name: `{group.name}`. Stability: {group.stability}."]
        lines.append("")
        if group.type == "attribute_group":
            lines += [
                "| Attribute | Type | Description | Examples | Stability |",
                "| --- | --- | --- | --- | --- |",
            ]
            attributes = sorted(group.attributes, key=lambda a: a.id)
            for attribute in attributes:
                examples = "; ".join(_example(value) for value in attribute.examples)
                lines.append(
                    f"| {_attribute_name(attribute)} | {attribute.display_type} "
                    f"| {_describe(attribute.brief, attribute.note)} | {_cell(examples)} "
                    f"| {attribute.stability} |"
                )
            for attribute in attributes:
                if attribute.is_enum:
                    lines += _members_table(attribute)
        else:
            lines += [
                "| Attribute | Type | Requirement level | Description | Examples | Stability |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
            for ref in sorted(group.refs, key=lambda r: r.ref):
                attribute = registry.attributes[ref.ref]
                examples = "; ".join(_example(value) for value in attribute.examples)
                description = _describe(ref.brief or attribute.brief, ref.note or attribute.note)
                lines.append(
                    f"| {_attribute_name(attribute)} | {attribute.display_type} "
                    f"| {ref.requirement_level} | {description} | {_cell(examples)} "
                    f"| {attribute.stability} |"
                )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- entry point


def generate(registry: Registry | None = None) -> dict[Path, str]:
    """The generated files and the text they should contain."""
    registry = registry or load_registry()
    return {MARKDOWN_PATH: render_markdown(registry), MODULE_PATH: render_module(registry)}


def stale_files(outputs: dict[Path, str] | None = None) -> list[Path]:
    """Generated files whose content on disk differs from what would be generated."""
    outputs = outputs if outputs is not None else generate()
    return [
        path
        for path, text in sorted(outputs.items())
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]


def _display(path: Path) -> str:
    try:
        return path.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a generated file is out of date",
    )
    args = parser.parse_args(argv)
    try:
        outputs = generate()
    except RegistryError as error:
        print(f"semconv registry error: {error}", file=sys.stderr)
        return 2
    if args.check:
        stale = stale_files(outputs)
        for path in stale:
            print(f"{_display(path)} is out of date", file=sys.stderr)
        if stale:
            print(f"run `{COMMAND}` to regenerate", file=sys.stderr)
            return 1
        return 0
    for path, text in outputs.items():
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        print(f"wrote {_display(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
