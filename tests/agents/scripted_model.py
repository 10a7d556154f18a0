"""A scripted model behind a local OpenAI-compatible chat-completions endpoint.

Standard library only, so every agent environment can import it. The agent
frameworks under test talk to it through their real OpenAI clients
(``POST /v1/chat/completions``, plain or ``stream: true``); it answers from
``refund_shop``'s scenarios:

- the scenario is the one whose user input opens the conversation (message
  content as a string or as a list of text parts, as frameworks send it);
- the turn is the number of tool results sent back so far, which must equal
  the number of tool calls asked for: the agent's loop is exercised, not
  stepped through;
- turn ``i`` asks for the scenario's ``i``-th tool call, then the answer:
  as text, or, when the request offers an output tool (``final_result``...,
  how pydantic-ai asks for structured output), as a call of it with
  ``{"answer": ...}``.

Anything it cannot place (unknown user input, results that do not match the
calls) is answered with HTTP 400, so a framework that mangles the
conversation fails its run instead of recording a wrong trace.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .refund_shop import Scenario

CREATED = 1748854800


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ) or "".join(part for part in content if isinstance(part, str))
    return ""


def reply(body: dict[str, Any], scenarios: Sequence[Scenario]) -> dict[str, Any]:
    """The scripted chat-completions response to one request (not streamed)."""
    messages = body["messages"]
    user = next(_text(m.get("content")) for m in messages if m.get("role") == "user")
    scenario = next(s for s in scenarios if s.user_input in user)
    turn = sum(1 for m in messages if m.get("role") == "tool")
    asked = sum(len(m.get("tool_calls") or ()) for m in messages if m.get("role") == "assistant")
    if turn != asked:
        raise ValueError(f"{asked} tool calls asked, {turn} results sent back")
    prompt_tokens = len(json.dumps(messages)) // 4
    if turn < len(scenario.calls):
        name, args = scenario.calls[turn]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn + 1}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ],
        }
        finish = "tool_calls"
    elif output_tool := _output_tool(body):
        # Structured output through an output tool (pydantic-ai's default for an output type).
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn + 1}",
                    "type": "function",
                    "function": {
                        "name": output_tool,
                        "arguments": json.dumps({"answer": scenario.answer}),
                    },
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": scenario.answer}
        finish = "stop"
    return {
        "id": f"chatcmpl-{scenario.name}-{turn}",
        "object": "chat.completion",
        "created": CREATED,
        "model": f"{body['model']}-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 20,
            "total_tokens": prompt_tokens + 20,
        },
    }


def _output_tool(body: dict[str, Any]) -> str | None:
    """The output tool the request offers (named ``final_result``...), if any."""
    for tool in body.get("tools") or ():
        name = str((tool.get("function") or {}).get("name", ""))
        if name.startswith("final_result"):
            return name
    return None


def chunks(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The same response as ``stream: true`` chunks: the delta, the finish, the usage."""
    choice = response["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant"}
    if message.get("content") is not None:
        delta["content"] = message["content"]
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    head = {key: response[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    yield {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
    yield {**head, "choices": [], "usage": response["usage"]}


def _handler(scenarios: Sequence[Scenario]) -> type[BaseHTTPRequestHandler]:
    class ScriptedChat(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                answer = reply(body, scenarios)
            except (ValueError, StopIteration, KeyError) as exc:
                self._send(400, {"error": {"message": repr(exc), "type": "invalid_request"}})
                return
            if not body.get("stream"):
                self._send(200, answer)
                return
            data = b"".join(
                b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks(answer)
            )
            data += b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return ScriptedChat


@contextmanager
def scripted_model(scenarios: Sequence[Scenario]) -> Iterator[str]:
    """Serve the scripted model on loopback; yields the base URL (``.../v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(scenarios))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
