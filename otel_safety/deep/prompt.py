"""The deep analysis prompt: a versioned data file, and one agent run written out for it.

The run is shown as the model needs it (task, tool calls with arguments and results, final
answer) with every secret masked and each long field cut, saying where and by how much, so
the model knows it did not see everything.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from otel_safety.analysis.secrets import mask
from otel_safety.model import Finding, Trajectory

PROMPT_FILE = Path(__file__).with_name("prompt.toml")
MAX_TOOL_CALLS = 40  # a run with more shows the first ones and says how many were left out


@dataclass(frozen=True)
class Prompt:
    version: str
    system: str
    user: str
    retry: str


@cache
def load_prompt(path: Path = PROMPT_FILE) -> Prompt:
    """The prompt file, checked: a missing part is an error at start, not a bad request."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        parts = {name: str(data[name]).strip() for name in ("version", "system", "user", "retry")}
        return Prompt(**parts)
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a usable deep analysis prompt: {exc}") from None


def messages(
    prompt: Prompt, trajectory: Trajectory, findings: Sequence[Finding], field_chars: int
) -> list[dict[str, str]]:
    """The chat messages that ask for one run's analysis."""
    user = prompt.user.format(
        trace_id=trajectory.trace_id,
        rules=_rules(findings),
        trajectory=render(trajectory, field_chars),
    )
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]


def render(trajectory: Trajectory, field_chars: int) -> str:
    """The run as labelled sections of plain text, secrets masked, fields cut."""
    cut = _Cutter(field_chars)
    lines = []
    if trajectory.scope.system_instructions:
        lines += ["## System instructions", cut(trajectory.scope.system_instructions)]
    requests = [m.content for m in trajectory.messages if m.role == "user" and m.content]
    task = trajectory.scope.user_request or (requests[0] if requests else "")
    lines += ["## Task", cut(task) or "(not captured)"]
    for later in requests:
        if later != task:
            lines += ["## Later user message", cut(later)]
    calls = trajectory.tool_calls
    lines.append(f"## Tool calls ({len(calls)})" if calls else "## Tool calls: none recorded")
    for number, call in enumerate(calls[:MAX_TOOL_CALLS], start=1):
        lines.append(f"{number}. {call.name}({cut(_arguments(call.arguments))})")
        if call.result is not None:
            lines.append(f"   result: {cut(call.result)}")
        if call.error:
            lines.append(f"   error: {cut(call.error)}")
    if len(calls) > MAX_TOOL_CALLS:
        lines.append(f"[{len(calls) - MAX_TOOL_CALLS} more tool calls not shown]")
    lines += ["## Final answer", cut(trajectory.final_output or "") or "(none)"]
    if cut.cut or cut.masked:
        lines.append(
            f"[note: {cut.cut} field(s) were cut to {field_chars} characters and "
            f"{cut.masked} secret(s) masked before this was sent]"
        )
    return "\n".join(lines)


class _Cutter:
    """Masks secrets and cuts one field, counting both for the closing note."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.cut = 0
        self.masked = 0

    def __call__(self, text: str) -> str:
        masked, count = mask(text)
        self.masked += count
        if len(masked) <= self.limit:
            return masked
        self.cut += 1
        left = len(masked) - self.limit
        return f"{masked[: self.limit]} [... {left} more characters cut]"


def _arguments(arguments: dict[str, Any] | str | None) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, default=str)


def _rules(findings: Sequence[Finding]) -> str:
    """What the first tier found, so the model knows why the run is in front of it."""
    fired = [f for f in findings if f.detected]
    if not fired:
        return "The rule tier flagged nothing certain in this run."
    named = ", ".join(f"{f.detector} (score {f.score:.2f})" for f in fired[:12])
    return f"The rule tier flagged: {named}. Judge the run yourself; the rules can be wrong."
