"""A scripted local judge server speaking Gemini REST and OpenAI chat-completions.

Tests queue canned replies (``Reply``) and the real clients talk to it over
HTTP on 127.0.0.1. Every request is recorded with its parsed JSON body so a
test can check exactly what was sent. When the script runs out the server
answers 500 with ``script exhausted`` so a missing reply cannot pass quietly.

    POST /{version}/models/{model}:generateContent   Gemini API
    POST /v1/chat/completions                        OpenAI-compatible
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_GEMINI_PATH = re.compile(r"^/(?P<version>[^/]+)/models/(?P<model>[^/:]+):generateContent$")
_OPENAI_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status, a body (JSON value or raw text), an optional delay."""

    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    raw: bool = False  # send ``body`` as-is (text) instead of JSON
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (e.g. Location)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    query: str = ""


Responder = Callable[[str, Any], Reply]


@dataclass
class _State:
    responder: Responder | None = None
    replies: deque[Reply] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)


def gemini_text(
    text: str,
    finish_reason: str = "STOP",
    prompt_tokens: int = 120,
    output_tokens: int = 30,
    thoughts_tokens: int = 0,
    model_version: str | None = "scripted",
) -> Reply:
    usage: dict[str, int] = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": prompt_tokens + output_tokens + thoughts_tokens,
    }
    if thoughts_tokens:
        usage["thoughtsTokenCount"] = thoughts_tokens
    body: dict[str, Any] = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": finish_reason,
                "index": 0,
            }
        ],
        "usageMetadata": usage,
    }
    if model_version is not None:  # None: an answer that does not say what served it
        body["modelVersion"] = model_version
    return Reply(body=body)


_RESPONSE_BLOCK = re.compile(r"<<<BEGIN RESPONSE (\w+)>>>\n(.*?)\n<<<END RESPONSE \1>>>", re.S)


def judged_response(body: Any) -> str:
    """The agent's response as a judge request fences it ('' when it has none).

    ``body`` is a Gemini ``generateContent`` request or an OpenAI chat request.
    """
    if "contents" in body:
        text = body["contents"][0]["parts"][0]["text"]
    else:
        text = body["messages"][1]["content"]
    match = _RESPONSE_BLOCK.search(text)
    return match.group(2) if match else ""


def requested_model(path: str) -> str:
    """The model a Gemini ``generateContent`` path asks for."""
    match = _GEMINI_PATH.match(path)
    assert match is not None, f"not a generateContent path: {path}"
    return match.group("model")


def gemini_json(value: Any, **kwargs: Any) -> Reply:
    return gemini_text(json.dumps(value), **kwargs)


def gemini_empty(prompt_tokens: int = 120) -> Reply:
    """A candidate with no parts at all (finish STOP), as the API sometimes sends."""
    return Reply(
        body={
            "candidates": [{"content": {"role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": prompt_tokens, "totalTokenCount": prompt_tokens},
        }
    )


def gemini_blocked(reason: str = "SAFETY", prompt_tokens: int = 120) -> Reply:
    """A candidate stopped by the safety filters, without content."""
    return Reply(
        body={
            "candidates": [
                {
                    "finishReason": reason,
                    "index": 0,
                    "safetyRatings": [
                        {
                            "category": "HARM_CATEGORY_DANGEROUS_CONTENT",
                            "probability": "HIGH",
                            "blocked": True,
                        }
                    ],
                }
            ],
            "usageMetadata": {"promptTokenCount": prompt_tokens, "totalTokenCount": prompt_tokens},
        }
    )


def gemini_prompt_blocked(reason: str = "SAFETY") -> Reply:
    """The prompt itself was blocked: no candidates, ``promptFeedback.blockReason``."""
    return Reply(
        body={"promptFeedback": {"blockReason": reason}, "usageMetadata": {"promptTokenCount": 50}}
    )


def status(code: int, message: str = "scripted failure", delay_s: float = 0.0) -> Reply:
    """An error status with a Google-style error body (OpenAI servers send similar JSON)."""
    return Reply(
        status=code,
        body={"error": {"code": code, "message": message, "status": "SCRIPTED"}},
        delay_s=delay_s,
    )


def openai_text(
    text: str | None,
    finish_reason: str = "stop",
    prompt_tokens: int = 110,
    completion_tokens: int = 25,
    refusal: str | None = None,
    model: str | None = "scripted",
) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if refusal is not None:
        message["refusal"] = refusal
    body: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if model is not None:  # the served model, as the answer names it
        body["model"] = model
    return Reply(body=body)


def openai_json(value: Any, **kwargs: Any) -> Reply:
    return openai_text(json.dumps(value), **kwargs)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body in one segment: otherwise Nagle plus delayed ACK add ~40 ms a request.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def do_POST(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        state = self.server.state
        known = _GEMINI_PATH.match(path) is not None or path == _OPENAI_PATH
        with state.lock:
            state.requests.append(
                Recorded("POST", path, {k.lower(): v for k, v in self.headers.items()}, body, query)
            )
            if not known:
                reply = status(404, f"no route {path}")
            elif state.replies:
                reply = state.replies.popleft()
            elif state.responder is not None:
                reply = state.responder(path, body)
            else:
                reply = status(500, "script exhausted")
        if reply.delay_s and state.stopping.wait(reply.delay_s):
            return
        payload = str(reply.body).encode() if reply.raw else json.dumps(reply.body).encode("utf-8")
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/plain" if reply.raw else "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, header in reply.headers:
                self.send_header(name, header)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, state: _State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class JudgeServer:
    """Start with ``start()``, stop with ``stop()``; ``base_url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, responder: Responder | None = None) -> None:
        """``responder(path, body)`` answers whenever no scripted reply is queued."""
        self._state = _State(responder=responder)
        self._server = _Server(self._state)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="judge-server",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def start(self) -> JudgeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._state.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def script(self, *replies: Reply) -> None:
        with self._state.lock:
            self._state.replies.extend(replies)

    @property
    def requests(self) -> list[Recorded]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def pending(self) -> int:
        with self._state.lock:
            return len(self._state.replies)

    def reset(self) -> None:
        with self._state.lock:
            self._state.replies.clear()
            self._state.requests.clear()
