"""A local OpenAI-compatible chat server for tests: real HTTP on 127.0.0.1, scripted replies."""

from __future__ import annotations

import contextlib
import json
import time
from collections import deque
from typing import Any

from loopback import LoopbackServer, QuietHandler


def tool_call_reply(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """A scripted assistant turn that asks for one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def text_reply(text: str) -> dict[str, Any]:
    """A scripted assistant turn with plain text."""
    return {"role": "assistant", "content": text}


def delayed(seconds: float, reply: dict[str, Any]) -> dict[str, Any]:
    """A scripted turn sent only after `seconds` (a slow model)."""
    return {**reply, "_delay": seconds}


def http_error(status: int, message: str = "scripted failure") -> dict[str, Any]:
    """A scripted HTTP error instead of a turn (an overloaded or broken endpoint)."""
    return {"_status": status, "_error": message}


class FakeOpenAIServer(LoopbackServer):
    """Serves `/v1/chat/completions`, answering each request with the next scripted turn.

    A turn made with `delayed` waits before answering; one made with `http_error` answers
    with that HTTP status.
    """

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies: deque[dict[str, Any]] = deque(replies)
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                # The client may stop waiting for a scripted slow reply: nothing to send then.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._answer()

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = json.loads(body or b"{}")
                server.requests.append(request)
                message = server.replies.popleft() if server.replies else text_reply("done")
                time.sleep(message.pop("_delay", 0))
                if "_status" in message:
                    error = {"error": {"message": message["_error"], "type": "server_error"}}
                    self.reply(json.dumps(error).encode(), "application/json", message["_status"])
                    return
                if request.get("stream"):
                    self._stream(request, message, f"chatcmpl-{len(server.requests)}")
                    return
                payload = {
                    "id": f"chatcmpl-{len(server.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": request.get("model", "fake-model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
                self.reply(json.dumps(payload).encode(), "application/json")

            def _stream(self, request: dict[str, Any], message: dict[str, Any], ident: str) -> None:
                """The turn as server-sent chunks, as the API streams it: the text in
                pieces, each tool call's name first and its arguments in pieces."""
                base = {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": request.get("model", "fake-model"),
                }
                deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
                text = message.get("content") or ""
                deltas += [{"content": text[i : i + 7]} for i in range(0, len(text), 7)]
                for index, call in enumerate(message.get("tool_calls") or []):
                    function = call["function"]
                    deltas.append(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": {"name": function["name"], "arguments": ""},
                                }
                            ]
                        }
                    )
                    arguments = function.get("arguments") or ""
                    deltas += [
                        {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                        for piece in (arguments[i : i + 9] for i in range(0, len(arguments), 9))
                    ]
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                chunks = [{**base, "choices": [{"index": 0, "delta": d}]} for d in deltas]
                chunks.append(
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
                )
                body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks)
                self.reply((body + "data: [DONE]\n\n").encode(), "text/event-stream")

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.endpoint}/v1"
