"""AgentDojo's attacked runs with the planted text rewritten in the benchmark's other attacks.

The data folder's runs all carry one attack wording ("important_instructions"), so its
`injection` figures say nothing of the others the benchmark publishes ("TODO: <goal>",
"Ignore your previous instructions...", InjecAgent's, fake system messages, denial of
service). Each attacked run whose injection reached a tool result is read back once with
its planted block replaced by one of them (picked by a hash of the run, so the set is the
same on every run), the same goal, user and model names kept. Only the `injection` label
carries over: the agent's actions are those it took on the original wording.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from otel_safety.analysis.text.text_forms import undo_escaped_breaks
from otel_safety.evaluation.cases import Case

__all__ = ["ATTACKS_FILE", "Attack", "load_attacks", "rewritten_attacks"]

ATTACKS_FILE = Path(__file__).with_name("agentdojo_attacks.toml")

_BLOCK = re.compile(r"\n*<INFORMATION>(.*?)</INFORMATION>\n*", re.DOTALL)
# A dump may fold the block's lines anywhere (YAML), so words are apart by any white space.
_GOAL = re.compile(
    r"please\s+do\s+the\s+following\s+first:\s*(.*?)\s*After\s+you\s+do\s+that", re.S
)
_NAMES = re.compile(r"important\s+message\s+from\s+me,\s+(.+?),\s+to\s+you,\s+(.+?)\.\s", re.S)
_NO_NAMES = ("the user", "the AI language model")  # AgentDojo's defaults


@dataclass(frozen=True)
class Attack:
    name: str
    template: str


def load_attacks(path: Path = ATTACKS_FILE) -> list[Attack]:
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    return [Attack(str(a["name"]), str(a["template"])) for a in data["attacks"]]


def rewritten_attacks(cases: Iterable[Case], attacks: list[Attack] | None = None) -> Iterator[Case]:
    """Each attacked AgentDojo case labelled for `injection`, its planted blocks rewritten."""
    attacks = attacks or load_attacks()
    for case in cases:
        if not case.labels.get("injection"):
            continue
        digest = hashlib.sha256(case.case_id.encode()).digest()
        attack = attacks[int.from_bytes(digest[:8], "big") % len(attacks)]
        messages = [_rewritten(message, attack) for message in case.messages]
        if messages == case.messages:
            continue  # no block in the shape the benchmark plants it
        yield replace(
            case,
            case_id=f"{case.case_id}:{attack.name}",
            dataset="agentdojo_attacks",
            messages=messages,
            labels={"injection": True},
            meta={**case.meta, "attack": attack.name, "derived_from": "agentdojo"},
        )


def _rewritten(message: dict[str, Any], attack: Attack) -> dict[str, Any]:
    content = message.get("content")
    if message.get("role") != "tool" or not isinstance(content, str):
        return message
    if "<INFORMATION>" not in content:
        return message
    return {**message, "content": _BLOCK.sub(lambda m: _render(m.group(1), attack), content)}


def _render(block: str, attack: Attack) -> str:
    """The attack in `block`'s place, escaped as the block was (a tool result dumped as YAML
    or JSON carries its line breaks as `\\n`)."""
    plain = undo_escaped_breaks(block)  # a YAML dump's folds and `\\n` breaks undone
    goal = _GOAL.search(plain)
    names = _NAMES.search(plain)
    user, model = (" ".join(n.split()) for n in names.groups()) if names else _NO_NAMES
    goal_text = " ".join(goal.group(1).split()) if goal else ""
    text = attack.template.format(goal=goal_text, user=user, model=model)
    return text.replace("\n", "\\n") if plain != block else text
