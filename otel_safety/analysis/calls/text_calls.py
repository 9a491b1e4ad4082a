"""Tool calls written as text: what an agent that acts by printing commands asked for.

Some agents never emit structured tool calls; they write a shell block, a `<tool_call>` JSON
tag or `Name({...})` into their answer and a harness runs it. This module turns that text back
into `ToolCall`s (source "output_text") so anything that judges tool calls can judge these
too. It only reads syntax: what the calls mean is for the caller to decide.
"""

from __future__ import annotations

import ast
import json
from typing import Any

import regex

from otel_safety.analysis import linear
from otel_safety.analysis.calls.arguments import tool_arguments
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.model import ToolCall

__all__ = ["tool_calls_from_text"]

# Caps that keep scanning cheap on hostile input.
_MAX_CALL = 8_000  # characters scanned for one written call's closing parenthesis
_MAX_WRITTEN_CANDIDATES = 200  # `Name(` openings examined in one answer

_FENCE = compiled(r"```[ \t]*([\w+.-]*)[ \t]*\n?(.*?)(?:```|\Z)", regex.DOTALL)
_TOOL_TAG = compiled(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", regex.DOTALL)
_CALL_NAME = compiled(r"(?<![\w.$])([A-Za-z_][\w.-]*)\(")
_SHELL_FENCES = frozenset(
    {"bash", "sh", "shell", "console", "zsh", "shell-session", "shellsession", "terminal"}
)
# Fences whose content may hold `Name({...})` calls; code in other languages is left alone.
_CALL_FENCES = frozenset({"", "tool_code", "tool_call", "json", "text", "plaintext"})
# A shell block becomes a call to this tool with a `command` argument: the shape a real
# shell tool has, so it is resolved like one.
_TEXT_SHELL_TOOL = "shell"
_LOOKS_LIKE_ARGUMENTS = linear.compile(r"[{\"']|\w+\s*=")  # RE2: linear on ASCII


def tool_calls_from_text(text: str, span_id: str | None = None) -> list[ToolCall]:
    """Tool calls an agent wrote into its answer: shell fences, <tool_call> tags, Name(...)."""
    calls: list[ToolCall] = []

    def tagged(match: regex.Match) -> str:
        call = _json_call(match.group(1), span_id)
        if call is None:
            return "\n" + match.group(1) + "\n"  # not JSON: maybe a Name(...) call inside
        calls.append(call)
        return "\n"

    def fenced(match: regex.Match) -> str:
        language, body = match.group(1).lower(), match.group(2)
        if language in _SHELL_FENCES:
            command = _fenced_commands(body)
            if command:
                calls.append(_text_call(_TEXT_SHELL_TOOL, {"command": command}, span_id))
            return "\n"
        return "\n" + body + "\n" if language in _CALL_FENCES else "\n"

    rest = _FENCE.sub(fenced, _TOOL_TAG.sub(tagged, text))
    calls.extend(_written_calls(rest, span_id))
    return calls


def _text_call(name: str, arguments: dict[str, Any] | str | None, span_id: str | None) -> ToolCall:
    return ToolCall(name=name, arguments=arguments, source="output_text", span_id=span_id)


def _fenced_commands(body: str) -> str:
    """A console transcript's `$ ` lines, or the whole block when it has no prompts."""
    lines = [line.strip() for line in body.splitlines()]
    prompted = [line[2:] for line in lines if line.startswith("$ ")]
    return "\n".join(prompted) if prompted else body.strip()


def _json_call(payload: str, span_id: str | None) -> ToolCall | None:
    """A `<tool_call>` JSON payload: `{"name", "arguments"}`, or nested under `function`."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    function = data["function"] if isinstance(data.get("function"), dict) else data
    name = function.get("name") or data.get("tool") or data.get("tool_name")
    if not isinstance(name, str) or not name.strip():
        return None
    keys = ("arguments", "parameters", "args", "input")
    arguments = next((function[k] for k in keys if function.get(k) is not None), None)
    return _text_call(name.strip(), tool_arguments(arguments), span_id)


def _written_calls(text: str, span_id: str | None) -> list[ToolCall]:
    """`Name({...json...})`, `Name(key="value")` and `Name("value")` forms in prose."""
    calls: list[ToolCall] = []
    position = 0
    for _ in range(_MAX_WRITTEN_CANDIDATES):
        match = _CALL_NAME.search(text, position)
        if match is None:
            break
        close = _balanced_close(text, match.end() - 1)
        arguments = _call_arguments(text[match.end() : close]) if close > 0 else None
        if arguments is None:
            position = match.end()
            continue
        calls.append(_text_call(match.group(1), arguments, span_id))
        position = close + 1
    return calls


def _balanced_close(text: str, open_index: int) -> int:
    """Index of the `)` matching the `(` at open_index, or -1."""
    depth, quote = 0, ""
    end = min(len(text), open_index + _MAX_CALL)
    index = open_index
    while index < end:
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return -1


def _call_arguments(inner: str) -> dict[str, Any] | str | None:
    """Arguments of a written call when they are literal data, else None (not a call)."""
    inner = inner.strip()
    if not _LOOKS_LIKE_ARGUMENTS.match(inner):
        return None  # prose in parentheses; skip the parser
    decoded = tool_arguments(inner)  # a JSON object, when it is one
    if isinstance(decoded, dict):
        return decoded
    try:
        node = ast.parse(f"_({inner})", mode="eval").body
        if not isinstance(node, ast.Call):
            return None
        if node.keywords and not node.args and all(k.arg for k in node.keywords):
            return {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
        if len(node.args) == 1 and not node.keywords:
            value = ast.literal_eval(node.args[0])
            return value if isinstance(value, str | dict) else None
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    return None
