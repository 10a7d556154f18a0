"""Judge backends: google-genai (Gemini API, Vertex AI) and OpenAI-compatible chat.

Each backend makes exactly one HTTP request per ``generate`` call; retries,
limits and the circuit breaker belong to ``JudgeService``. Failures to get an
answer raise ``JudgeUnavailable`` with a closed ``reason``:

    timeout      no complete answer within ``timeout_s``
    transport    connection refused, reset, protocol error
    http_408     request timeout status
    http_429     rate limited
    http_5xx     server error
    http_4xx     any other client error (bad key, bad request); not retried
    bad_response the HTTP answer was not the protocol's JSON
    redirect     the answer was a redirect; it is never followed (the API key
                 and the transcript go to the configured origin only)

An answer that arrives but is blocked, truncated or empty is a ``BackendReply``
(the service turns it into ERROR verdicts), not an exception.

Every reply carries what the service says served it (``model_version``):
Gemini's ``modelVersion`` (google-genai's ``response.model_version``), the
OpenAI-compatible answer's ``model``; ``None`` when the answer does not say.
Hosted aliases (``gemini-2.5-flash``) move to new models without notice, and
this is how a verdict records which one judged it.

Answers are read through :class:`CappedTransport`: at most ``max_answer_bytes``
of HTTP body are read (uncompressed: the request asks for ``identity``), and a
longer answer is dropped unread and reported as ``BackendReply(too_large=True)``,
which the service turns into ERROR ``answer_too_large``. It is never parsed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx2
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from sidecar.errors import JudgeUnavailable
from sidecar.judge.config import BackendKind, JudgeSettings
from sidecar.judge.service import Backend, BackendReply

if TYPE_CHECKING:
    from sidecar.judge.prompt import JudgeRequest

DEFAULT_MAX_ANSWER_BYTES = 262_144


class AnswerTooLarge(Exception):
    """The HTTP answer is longer than the cap (raised while reading, before parsing)."""


class RedirectRefused(Exception):
    """The judge answered with a redirect (3xx), which is never followed."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(f"HTTP {status} redirect to {location or 'an unnamed location'}")
        self.status = status
        self.location = location


def _redirect_error(exc: RedirectRefused) -> JudgeUnavailable:
    return JudgeUnavailable(
        "redirect",
        f"{exc}: not followed; set the judge's base URL to the origin that answers",
    )


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise AnswerTooLarge(f"answer longer than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """An HTTP transport whose response bodies end with ``AnswerTooLarge`` past ``limit`` bytes.

    The request asks for an uncompressed answer, so the cap counts what would
    be parsed; an answer compressed anyway is refused as a bad response rather
    than inflated.
    """

    def __init__(self, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._limit = limit
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        if 300 <= response.status_code < 400:
            # Never followed, whatever the client's settings: another origin
            # would receive the API key and the transcript.
            await response.aclose()
            raise RedirectRefused(response.status_code, response.headers.get("Location", "")[:200])
        length = response.headers.get("Content-Length", "")
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if (length.isdigit() and int(length) > self._limit) or encoding not in ("", "identity"):
            await response.aclose()
            if encoding not in ("", "identity"):
                raise httpx2.DecodingError(f"answer compressed ({encoding}) although not asked")
            raise AnswerTooLarge(f"answer of {length} bytes is longer than {self._limit}")
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _too_large(exc: BaseException) -> bool:
    # google-genai may wrap what the transport raised; look down the chain.
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AnswerTooLarge):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _too_large_reply() -> BackendReply:
    return BackendReply(
        text=None, finish_reason="answer_too_large", input_tokens=0, output_tokens=0, too_large=True
    )


# Finish reasons meaning the model (or its filters) refused to produce the answer.
_GEMINI_BLOCKED = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
)


def status_reason(code: int) -> str:
    if code == 408:
        return "http_408"
    if code == 429:
        return "http_429"
    if 500 <= code <= 599:
        return "http_5xx"
    return "http_4xx"


class GeminiBackend:
    """google-genai's async client; one ``generateContent`` call per request.

    Arguments left as ``None`` are left to google-genai, which reads its
    standard environment (API key, base URL, Vertex AI project/location).
    google-genai's own retries are switched off so the service's policy is
    the only one in force. The HTTP client is httpx2 (the one google-genai
    3.x is built on) whether or not aiohttp is installed, so failures look
    the same everywhere and the same as the OpenAI-compatible backend's.
    """

    def __init__(
        self,
        *,
        api_version: str = "v1beta",
        base_url: str | None = None,
        timeout_s: float = 30.0,
        max_output_tokens: int = 2048,
        vertexai: bool | None = None,
        api_key: str | None = None,
        project: str | None = None,
        location: str | None = None,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self._timeout_s = timeout_s
        self._max_output_tokens = max_output_tokens
        self._http = httpx2.AsyncClient(
            follow_redirects=False, transport=CappedTransport(max_answer_bytes)
        )
        options = genai_types.HttpOptions(
            api_version=api_version,
            base_url=base_url,
            timeout=max(1, round(timeout_s * 1000)),
            retry_options=genai_types.HttpRetryOptions(attempts=1),
            httpx_async_client=self._http,
        )
        self._client = genai.Client(
            vertexai=vertexai,
            api_key=api_key,
            project=project,
            location=location,
            http_options=options,
        )
        # gen_ai.provider.name on the judge's spans (the GenAI conventions' values).
        self.provider_name = "gcp.vertex_ai" if self._client.vertexai else "gcp.gemini"

    def _config(self, request: JudgeRequest) -> genai_types.GenerateContentConfig:
        return genai_types.GenerateContentConfig(
            system_instruction=request.system_instruction,
            temperature=0.0,
            candidate_count=1,
            max_output_tokens=self._max_output_tokens,
            response_mime_type="application/json",
            response_schema=request.response_schema,
        )

    async def generate(self, model: str, request: JudgeRequest) -> BackendReply:
        contents = genai_types.Content(
            role="user", parts=[genai_types.Part(text=request.user_text)]
        )
        config = self._config(request)
        try:
            # httpx2's timeout bounds each read; this bounds the whole exchange.
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.aio.models.generate_content(
                    model=model, contents=contents, config=config
                )
        except AnswerTooLarge:
            return _too_large_reply()
        except RedirectRefused as exc:
            raise _redirect_error(exc) from exc
        except (TimeoutError, httpx2.TimeoutException) as exc:
            raise JudgeUnavailable("timeout", f"no answer within {self._timeout_s}s") from exc
        except httpx2.TransportError as exc:
            raise JudgeUnavailable("transport", f"{type(exc).__name__}: {exc}") from exc
        except genai_errors.APIError as exc:
            raise JudgeUnavailable(
                status_reason(exc.code), f"HTTP {exc.code}: {exc.message}"
            ) from exc
        except ValueError as exc:  # a 2xx body that is not JSON, or not the response shape
            raise JudgeUnavailable("bad_response", f"unreadable answer: {exc}") from exc
        return _gemini_reply(response)

    async def aclose(self) -> None:
        await self._client.aio.aclose()
        await self._http.aclose()


def _gemini_reply(response: genai_types.GenerateContentResponse) -> BackendReply:
    usage = response.usage_metadata
    version = _version(response.model_version)
    input_tokens = (usage.prompt_token_count or 0) if usage else 0
    # Thinking tokens are billed as output.
    output_tokens = (
        (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0) if usage else 0
    )
    if not response.candidates:
        feedback = response.prompt_feedback
        block = feedback.block_reason if feedback else None
        return BackendReply(
            text=None,
            finish_reason=_enum_text(block) if block else None,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            blocked=block is not None,
            model_version=version,
        )
    candidate = response.candidates[0]
    finish = _enum_text(candidate.finish_reason) if candidate.finish_reason else None
    parts = candidate.content.parts if candidate.content and candidate.content.parts else []
    texts = [p.text for p in parts if p.text is not None and not p.thought]
    return BackendReply(
        text="".join(texts) if texts else None,
        finish_reason=finish,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        blocked=finish in _GEMINI_BLOCKED,
        truncated=finish == "MAX_TOKENS",
        model_version=version,
    )


def _version(value: object) -> str | None:
    # A label value: trimmed, bounded, and absent rather than empty.
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:128]


def _enum_text(value: object) -> str:
    # google-genai gives enum members for known values and plain strings for new ones.
    text = getattr(value, "value", value)
    return str(text)


class OpenAICompatBackend:
    """POST ``{base_url}/chat/completions`` with a strict JSON-schema response format.

    Works with OpenAI and with Ollama, vLLM and llama.cpp servers. The bearer
    key is optional (local servers rarely need one).
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_output_tokens: int = 2048,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self._timeout_s = timeout_s
        self._max_output_tokens = max_output_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx2.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=timeout_s,
            follow_redirects=False,
            transport=CappedTransport(max_answer_bytes),
        )
        # gen_ai.provider.name on the judge's spans: OpenAI itself, or a server speaking its API.
        host = self._http.base_url.host
        self.provider_name = "openai" if host.endswith("openai.com") else "openai_compatible"

    def body(self, model: str, request: JudgeRequest) -> dict[str, Any]:
        return {
            "model": model,
            "messages": [
                {"role": "system", "content": request.system_instruction},
                {"role": "user", "content": request.user_text},
            ],
            "temperature": 0,
            "n": 1,
            "max_tokens": self._max_output_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "verdict",
                    "schema": strict_schema(request.response_schema),
                    "strict": True,
                },
            },
        }

    async def generate(self, model: str, request: JudgeRequest) -> BackendReply:
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._http.post("chat/completions", json=self.body(model, request))
        except AnswerTooLarge:
            return _too_large_reply()
        except RedirectRefused as exc:
            raise _redirect_error(exc) from exc
        except (TimeoutError, httpx2.TimeoutException) as exc:
            raise JudgeUnavailable("timeout", f"no answer within {self._timeout_s}s") from exc
        except httpx2.TransportError as exc:
            raise JudgeUnavailable("transport", f"{type(exc).__name__}: {exc}") from exc
        if response.status_code >= 300:
            raise JudgeUnavailable(
                status_reason(response.status_code),
                f"HTTP {response.status_code}: {response.text[:200]}",
            )
        try:
            payload = response.json()
        except ValueError as exc:
            raise JudgeUnavailable("bad_response", f"answer is not JSON: {exc}") from exc
        if not isinstance(payload, dict):
            raise JudgeUnavailable("bad_response", "answer is not a JSON object")
        return _openai_reply(payload)

    async def aclose(self) -> None:
        await self._http.aclose()


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with ``additionalProperties: false`` on every object, as strict mode requires."""
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if isinstance(value, Mapping):
            value = (
                strict_schema(value)
                if key != "properties"
                else {name: strict_schema(sub) for name, sub in value.items()}
            )
        result[key] = value
    if result.get("type") == "object":
        result.setdefault("additionalProperties", False)
    return result


def _openai_reply(payload: Mapping[str, Any]) -> BackendReply:
    usage = _object(payload.get("usage"))
    input_tokens = _int(usage.get("prompt_tokens"))
    output_tokens = _int(usage.get("completion_tokens"))
    version = _version(payload.get("model"))
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return BackendReply(
            None, None, input_tokens, output_tokens, blocked=False, model_version=version
        )
    choice = choices[0]
    message = _object(choice.get("message"))
    finish = choice.get("finish_reason")
    finish_text = str(finish) if finish is not None else None
    content = message.get("content")
    text = content if isinstance(content, str) else None
    refused = isinstance(message.get("refusal"), str) and bool(message.get("refusal"))
    return BackendReply(
        text=text,
        finish_reason=finish_text,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        blocked=refused or finish_text == "content_filter",
        truncated=finish_text == "length",
        model_version=version,
    )


def _object(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def make_backend(settings: JudgeSettings, environ: Mapping[str, str] = os.environ) -> Backend:
    """The backend the settings ask for, with credentials from the environment."""
    match settings.backend:
        case BackendKind.OPENAI:
            return OpenAICompatBackend(
                base_url=settings.openai_base_url,
                api_key=environ.get(settings.openai_api_key_env) or None,
                timeout_s=settings.timeout_s,
                max_output_tokens=settings.max_output_tokens,
                max_answer_bytes=settings.max_answer_bytes,
            )
        case BackendKind.GEMINI | BackendKind.VERTEX:
            return GeminiBackend(
                api_version=settings.api_version,
                base_url=settings.base_url,
                timeout_s=settings.timeout_s,
                max_output_tokens=settings.max_output_tokens,
                # None lets GOOGLE_GENAI_USE_VERTEXAI decide.
                vertexai=True if settings.backend is BackendKind.VERTEX else None,
                project=settings.project,
                location=settings.location,
                max_answer_bytes=settings.max_answer_bytes,
            )
