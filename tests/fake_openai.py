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

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.endpoint}/v1"
