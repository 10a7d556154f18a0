"""The backends against the local scripted server, with the real HTTP clients."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sidecar.adapters.judge_backends import (
    GeminiBackend,
    OpenAICompatBackend,
    make_backend,
    status_reason,
    strict_schema,
)
from sidecar.errors import JudgeUnavailable
from sidecar.judge.config import BackendKind, JudgeSettings
from sidecar.judge.prompt import JudgeRequest, build_request
from sidecar.judge.service import BackendReply
from tests.builders import JUDGE_MODEL, refund_rubric, refund_transcript
from tests.gemini_server import (
    JudgeServer,
    Reply,
    gemini_blocked,
    gemini_empty,
    gemini_json,
    gemini_prompt_blocked,
    gemini_text,
    openai_json,
    openai_text,
    status,
)
from tests.judge_fixtures import GOOD_VERDICTS

NONCE = "0123456789abcdef0123"
REPO = Path(__file__).resolve().parents[1]


def _request() -> JudgeRequest:
    return build_request(refund_rubric(), refund_transcript(), nonce=NONCE)


@pytest.fixture
async def gemini(judge_server: JudgeServer) -> AsyncIterator[GeminiBackend]:
    backend = GeminiBackend(base_url=judge_server.base_url, api_key="test-key", timeout_s=2.0)
    yield backend
    await backend.aclose()


@pytest.fixture
async def openai(judge_server: JudgeServer) -> AsyncIterator[OpenAICompatBackend]:
    backend = OpenAICompatBackend(
        base_url=judge_server.openai_base_url, api_key="sk-test", timeout_s=2.0
    )
    yield backend
    await backend.aclose()


# --- Gemini ------------------------------------------------------------------


async def test_gemini_sends_the_agreed_request(
    judge_server: JudgeServer, gemini: GeminiBackend
) -> None:
    judge_server.script(gemini_json(GOOD_VERDICTS))
    request = _request()
    await gemini.generate(JUDGE_MODEL, request)

    [sent] = judge_server.requests
    assert sent.path == f"/v1beta/models/{JUDGE_MODEL}:generateContent"
    assert sent.headers["x-goog-api-key"] == "test-key"
    body = sent.body
    assert body["systemInstruction"]["parts"] == [{"text": request.system_instruction}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": request.user_text}]}]
    config = body["generationConfig"]
    assert config["temperature"] == 0
    assert config["candidateCount"] == 1
    assert config["responseMimeType"] == "application/json"
    schema = config["responseSchema"]
    # The judge also reports whether the data tried to instruct it (issue 10).
    assert schema["required"] == ["criteria", "data_tried_to_instruct"]
    item = schema["properties"]["criteria"]["items"]
    assert item["properties"]["verdict"]["enum"] == ["PASS", "FAIL"]
    assert item["properties"]["criterion"]["enum"] == ["grounded", "polite"]
    # No tools, no history: exactly one user turn and nothing else steering the model.
    assert set(body) == {"contents", "systemInstruction", "generationConfig"}


async def test_gemini_api_version_is_pinned(judge_server: JudgeServer) -> None:
    backend = GeminiBackend(base_url=judge_server.base_url, api_key="k", api_version="v1")
    try:
        judge_server.script(gemini_json(GOOD_VERDICTS))
        await backend.generate("gemini-2.0-flash", _request())
    finally:
        await backend.aclose()
    assert judge_server.requests[0].path == "/v1/models/gemini-2.0-flash:generateContent"


@pytest.mark.parametrize(
    ("reply", "want"),
    [
        pytest.param(
            gemini_text("{}", prompt_tokens=900, output_tokens=40),
            BackendReply("{}", "STOP", 900, 40, model_version="scripted"),
            id="text",
        ),
        pytest.param(
            gemini_text("{}", output_tokens=40, thoughts_tokens=300),
            BackendReply("{}", "STOP", 120, 340, model_version="scripted"),
            id="thinking-tokens-billed-as-output",
        ),
        pytest.param(
            gemini_text('{"crit', finish_reason="MAX_TOKENS"),
            BackendReply('{"crit', "MAX_TOKENS", 120, 30, truncated=True, model_version="scripted"),
            id="max-tokens",
        ),
        pytest.param(
            gemini_blocked("SAFETY"),
            BackendReply(None, "SAFETY", 120, 0, blocked=True),
            id="safety",
        ),
        pytest.param(
            gemini_blocked("RECITATION"),
            BackendReply(None, "RECITATION", 120, 0, blocked=True),
            id="recitation",
        ),
        pytest.param(
            gemini_prompt_blocked("PROHIBITED_CONTENT"),
            BackendReply(None, "PROHIBITED_CONTENT", 50, 0, blocked=True),
            id="prompt-blocked",
        ),
        pytest.param(gemini_empty(), BackendReply(None, "STOP", 120, 0), id="no-parts"),
        pytest.param(
            Reply(body={"candidates": []}), BackendReply(None, None, 0, 0), id="no-candidates"
        ),
    ],
)
async def test_gemini_reply(
    judge_server: JudgeServer, gemini: GeminiBackend, reply: Reply, want: BackendReply
) -> None:
    judge_server.script(reply)
    assert await gemini.generate(JUDGE_MODEL, _request()) == want


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        pytest.param(status(429), "http_429", id="429"),
        pytest.param(status(408), "http_408", id="408"),
        pytest.param(status(500), "http_5xx", id="500"),
        pytest.param(status(503), "http_5xx", id="503"),
        pytest.param(status(400), "http_4xx", id="400"),
        pytest.param(status(403), "http_4xx", id="403"),
        pytest.param(Reply(body="<html>oops</html>", raw=True), "bad_response", id="html-200"),
    ],
)
async def test_gemini_failures_raise_unavailable_once(
    judge_server: JudgeServer, gemini: GeminiBackend, reply: Reply, reason: str
) -> None:
    judge_server.script(reply, gemini_json(GOOD_VERDICTS))
    with pytest.raises(JudgeUnavailable) as caught:
        await gemini.generate(JUDGE_MODEL, _request())
    assert caught.value.reason == reason
    # google-genai's own retries are off: our service owns the retry policy.
    assert len(judge_server.requests) == 1


async def test_gemini_timeout(judge_server: JudgeServer) -> None:
    backend = GeminiBackend(base_url=judge_server.base_url, api_key="k", timeout_s=0.2)
    judge_server.script(Reply(body=GOOD_VERDICTS, delay_s=1.0))
    try:
        with pytest.raises(JudgeUnavailable) as caught:
            await backend.generate(JUDGE_MODEL, _request())
    finally:
        await backend.aclose()
    assert caught.value.reason == "timeout"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_gemini_connection_refused_is_transport() -> None:
    backend = GeminiBackend(base_url=f"http://127.0.0.1:{_closed_port()}", api_key="k")
    try:
        with pytest.raises(JudgeUnavailable) as caught:
            await backend.generate(JUDGE_MODEL, _request())
    finally:
        await backend.aclose()
    assert caught.value.reason == "transport"


@pytest.mark.slow
def test_gemini_backend_honours_google_genai_environment(judge_server: JudgeServer) -> None:
    """GOOGLE_GEMINI_BASE_URL and GOOGLE_API_KEY reach the client with no setting at all."""
    judge_server.script(gemini_json(GOOD_VERDICTS))
    script = textwrap.dedent(
        """
        import asyncio
        from tests.builders import refund_rubric, refund_transcript
        from sidecar.adapters.judge_backends import make_backend
        from sidecar.judge.config import JudgeSettings
        from sidecar.judge.prompt import build_request

        async def main() -> None:
            backend = make_backend(JudgeSettings())
            reply = await backend.generate(
                "gemini-2.5-flash", build_request(refund_rubric(), refund_transcript())
            )
            await backend.aclose()
            print(reply.finish_reason)

        asyncio.run(main())
        """
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "GEMINI_")) and k != "SSL_CERT_FILE"
    }
    env |= {"GOOGLE_API_KEY": "env-key", "GOOGLE_GEMINI_BASE_URL": judge_server.base_url}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "STOP"
    [sent] = judge_server.requests
    assert sent.headers["x-goog-api-key"] == "env-key"
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"


# --- OpenAI-compatible -----------------------------------------------------------


async def test_openai_sends_the_agreed_request(
    judge_server: JudgeServer, openai: OpenAICompatBackend
) -> None:
    judge_server.script(openai_json(GOOD_VERDICTS))
    request = _request()
    await openai.generate("llama3.1:8b", request)

    [sent] = judge_server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = sent.body
    assert body["model"] == "llama3.1:8b"
    assert body["messages"] == [
        {"role": "system", "content": request.system_instruction},
        {"role": "user", "content": request.user_text},
    ]
    assert body["temperature"] == 0
    assert "tools" not in body
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "verdict"
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"] == strict_schema(request.response_schema)


async def test_openai_without_key_sends_no_authorization(judge_server: JudgeServer) -> None:
    backend = OpenAICompatBackend(base_url=judge_server.openai_base_url)
    judge_server.script(openai_json(GOOD_VERDICTS))
    try:
        await backend.generate("qwen2.5", _request())
    finally:
        await backend.aclose()
    assert "authorization" not in judge_server.requests[0].headers


def test_strict_schema_closes_every_object() -> None:
    schema = strict_schema(_request().response_schema)
    assert schema["additionalProperties"] is False
    item = schema["properties"]["criteria"]["items"]
    assert item["additionalProperties"] is False
    # Strict mode requires every property to be listed as required.
    assert sorted(item["required"]) == sorted(item["properties"])


@pytest.mark.parametrize(
    ("reply", "want"),
    [
        pytest.param(
            openai_text("{}", prompt_tokens=700, completion_tokens=20),
            BackendReply("{}", "stop", 700, 20, model_version="scripted"),
            id="text",
        ),
        pytest.param(
            openai_text('{"cr', finish_reason="length"),
            BackendReply('{"cr', "length", 110, 25, truncated=True, model_version="scripted"),
            id="length",
        ),
        pytest.param(
            openai_text(None, finish_reason="content_filter"),
            BackendReply(None, "content_filter", 110, 25, blocked=True, model_version="scripted"),
            id="content-filter",
        ),
        pytest.param(
            openai_text(None, refusal="I can't help with that."),
            BackendReply(None, "stop", 110, 25, blocked=True, model_version="scripted"),
            id="refusal",
        ),
        pytest.param(Reply(body={"choices": []}), BackendReply(None, None, 0, 0), id="no-choices"),
    ],
)
async def test_openai_reply(
    judge_server: JudgeServer, openai: OpenAICompatBackend, reply: Reply, want: BackendReply
) -> None:
    judge_server.script(reply)
    assert await openai.generate("m", _request()) == want


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        pytest.param(status(429), "http_429", id="429"),
        pytest.param(status(500), "http_5xx", id="500"),
        pytest.param(status(401), "http_4xx", id="401"),
        pytest.param(Reply(body="not json", raw=True), "bad_response", id="text-200"),
        pytest.param(Reply(body=[1, 2]), "bad_response", id="array-200"),
    ],
)
async def test_openai_failures(
    judge_server: JudgeServer, openai: OpenAICompatBackend, reply: Reply, reason: str
) -> None:
    judge_server.script(reply)
    with pytest.raises(JudgeUnavailable) as caught:
        await openai.generate("m", _request())
    assert caught.value.reason == reason


async def test_openai_timeout(judge_server: JudgeServer) -> None:
    backend = OpenAICompatBackend(base_url=judge_server.openai_base_url, timeout_s=0.2)
    judge_server.script(Reply(body=GOOD_VERDICTS, delay_s=1.0))
    try:
        with pytest.raises(JudgeUnavailable) as caught:
            await backend.generate("m", _request())
    finally:
        await backend.aclose()
    assert caught.value.reason == "timeout"


# --- selection ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason"),
    [(408, "http_408"), (429, "http_429"), (500, "http_5xx"), (599, "http_5xx"), (404, "http_4xx")],
)
def test_status_reason(code: int, reason: str) -> None:
    assert status_reason(code) == reason


async def test_make_backend_openai_reads_the_named_key(judge_server: JudgeServer) -> None:
    settings = JudgeSettings(
        backend=BackendKind.OPENAI,
        openai_base_url=judge_server.openai_base_url,
        openai_api_key_env="MY_KEY",
    )
    backend = make_backend(settings, environ={"MY_KEY": "sk-env"})
    judge_server.script(openai_json(GOOD_VERDICTS))
    try:
        assert isinstance(backend, OpenAICompatBackend)
        await backend.generate("m", _request())
    finally:
        await backend.aclose()
    assert judge_server.requests[0].headers["authorization"] == "Bearer sk-env"
