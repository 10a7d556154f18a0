"""A small agent loop on the real OpenAI client, traced by a real instrumentation.

Runs in its own environment (``tests/agents/openai_env``, made by
``scripts/bootstrap openai``), never in the project's, so of sidecar it may
import only ``sidecar.ingest.otlpjson`` (protobuf only). From the repository root::

    $SIDECAR_OPENAI_PYTHON -m tests.agents.openai_agent MODE [--no-root]

prints one JSON object per scenario on stdout: ``{"scenario", "traces",
"logs"}``, where ``traces`` is a list of OTLP/JSON ``ExportTraceServiceRequest``
lines (one per trace) and ``logs`` a list of OTLP/JSON ``ExportLogsServiceRequest``
lines (empty when the mode emits no log records), as a Collector's file
exporter would write them. ``openai_traces`` runs it for the tests.

What is real: the ``openai`` client (``chat.completions.create`` with tools),
the instrumentation and its environment variables, the OTel SDK. What is
scripted: the model, a local HTTP server speaking the chat-completions
protocol (:class:`FakeOpenAI`) that answers each scenario's turns from
``refund_shop``: one tool call per turn, then the answer.

The instrumentations trace the client calls only, so the loop
(user -> model -> tool calls -> tool results -> model -> answer) is written
here, the way a user without a framework writes it, under one
``invoke_agent refund-agent`` span (no content on it) unless ``--no-root``:
then each chat call is a trace of its own. Tools run as plain functions
without spans of their own, as in most hand-written loops.

MODES (the environment each sets before instrumenting):

- ``otel-span``: opentelemetry-instrumentation-openai-v2,
  ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``,
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only``;
- ``otel-event``: the same with ``event_only`` (content in
  ``gen_ai.client.inference.operation.details`` log records);
- ``otel-legacy``: the default (1.30) conventions with ``...CONTENT=true``:
  content in per-message log records (``gen_ai.user.message``, ``gen_ai.choice``);
- ``otel-off``: the default, no content;
- ``oi``: openinference-instrumentation-openai, content on (its default);
- ``oi-hidden``: the same with ``OPENINFERENCE_HIDE_INPUTS=true`` and
  ``OPENINFERENCE_HIDE_OUTPUTS=true``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.ingest.otlpjson import request_to_dict

from .genai_spans import PerRunIds, SeededIdGenerator, make_resource
from .refund_shop import (
    INSTRUCTION,
    REFUND_OK,
    REFUND_OVER_LIMIT,
    REFUND_UNGROUNDED,
    TOOLS,
    Scenario,
)

MODEL = "gpt-4o-mini"
AGENT = "refund-agent"


def cancel_order(order_id: str) -> dict[str, Any]:
    """Cancel an order. Not on the refund agent's allowlist."""
    return {"order_id": order_id, "status": "cancelled"}


FORBIDDEN_TOOL = Scenario(
    name="oai-forbidden-tool",
    user_input="Order A1005 is taking forever. Just cancel it and refund me.",
    calls=[
        ("lookup_order", {"order_id": "A1005"}),
        ("cancel_order", {"order_id": "A1005"}),
    ],
    answer="Order A1005 (kettle, $34.75) is cancelled.",
    session_id="session-0005",
    notes="cancel_order is not on the allowlist",
    expected_failures=frozenset({"allowed_tools"}),
)

# The four verdicts: acceptable, over-limit argument, ungrounded amount, forbidden tool.
SCENARIOS: tuple[Scenario, ...] = (REFUND_OK, REFUND_OVER_LIMIT, REFUND_UNGROUNDED, FORBIDDEN_TOOL)
BY_NAME = {s.name: s for s in SCENARIOS}
FUNCTIONS: dict[str, Callable[..., Any]] = {f.__name__: f for f in [*TOOLS, cancel_order]}

_OFF = ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "OTEL_SEMCONV_STABILITY_OPT_IN")
MODES: dict[str, dict[str, str]] = {
    "otel-span": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
    },
    "otel-event": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only",
    },
    "otel-legacy": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
    "otel-off": {},
    "oi": {},
    "oi-hidden": {"OPENINFERENCE_HIDE_INPUTS": "true", "OPENINFERENCE_HIDE_OUTPUTS": "true"},
}


# --- the scripted model ----------------------------------------------------------------------


def tool_schema(function: Callable[..., Any]) -> dict[str, Any]:
    params = list(function.__code__.co_varnames[: function.__code__.co_argcount])
    types = {"amount": "number"}
    return {
        "type": "function",
        "function": {
            "name": function.__name__,
            "description": (function.__doc__ or "").strip(),
            "parameters": {
                "type": "object",
                "properties": {p: {"type": types.get(p, "string")} for p in params},
                "required": params,
            },
        },
    }


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted answer to one chat-completions request.

    The scenario is the one whose user input opens the conversation; the turn
    is the number of tool results sent back so far, which must match the
    calls made, so the loop is exercised, not stepped through.
    """
    messages = body["messages"]
    user = next(m["content"] for m in messages if m["role"] == "user")
    scenario = next(s for s in SCENARIOS if s.user_input == user)
    turn = sum(1 for m in messages if m["role"] == "tool")
    asked = sum(len(m.get("tool_calls") or ()) for m in messages if m["role"] == "assistant")
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
    else:
        message = {"role": "assistant", "content": scenario.answer}
        finish = "stop"
    return {
        "id": f"chatcmpl-{scenario.name}-{turn}",
        "object": "chat.completion",
        "created": 1748854800,
        "model": f"{body['model']}-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 20,
            "total_tokens": prompt_tokens + 20,
        },
    }


class FakeOpenAI(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions``, answered by :func:`reply`."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        try:
            status, answer = 200, reply(body)
        except (ValueError, StopIteration, KeyError) as exc:
            status, answer = 400, {"error": {"message": repr(exc), "type": "invalid_request"}}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def fake_openai() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


# --- the agent loop ----------------------------------------------------------------------------


def run_agent(client: Any, tracer: trace.Tracer, scenario: Scenario, root: bool) -> str:
    """user -> model -> tool calls -> tool results -> model -> ... -> answer."""
    tools = [tool_schema(f) for f in FUNCTIONS.values()]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": INSTRUCTION},
        {"role": "user", "content": scenario.user_input},
    ]

    def loop() -> str:
        for _ in range(10):
            response = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
            message = response.choices[0].message
            if not message.tool_calls:
                return str(message.content)
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )
        raise RuntimeError("the agent loop did not end")

    if not root:
        return loop()
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": AGENT,
        "gen_ai.conversation.id": scenario.session_id,
    }
    with tracer.start_as_current_span(
        f"invoke_agent {AGENT}", kind=trace.SpanKind.INTERNAL, attributes=attributes
    ):
        return loop()


def instrument(mode: str) -> None:
    for name in _OFF:
        os.environ.pop(name, None)
    os.environ.update(MODES[mode])
    if mode.startswith("otel"):
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor as OIInstrumentor

        OIInstrumentor().instrument()


def run_all(mode: str, scenarios: Sequence[Scenario], root: bool) -> list[dict[str, Any]]:
    ids = PerRunIds()
    resource = make_resource(AGENT, "2.0.0")
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=resource, id_generator=ids)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    set_logger_provider(logger_provider)
    instrument(mode)

    import openai

    tracer = provider.get_tracer("sidecar.tests.openai_agent")
    out: list[dict[str, Any]] = []
    with fake_openai() as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
        for scenario in scenarios:
            spans.clear()
            logs.clear()
            ids.current = SeededIdGenerator(scenario.name)
            answer = run_agent(client, tracer, scenario, root)
            if answer != scenario.answer:
                raise RuntimeError(f"{scenario.name}: answered {answer!r}")
            finished = list(spans.get_finished_spans())
            by_trace: dict[int, list[Any]] = {}
            for span in finished:
                by_trace.setdefault(span.context.trace_id, []).append(span)
            records = list(logs.get_finished_logs())
            out.append(
                {
                    "scenario": scenario.name,
                    "traces": [_json(encode_spans(group)) for group in by_trace.values()],
                    "logs": [_json(encode_logs(records))] if records else [],
                }
            )
    provider.shutdown()
    logger_provider.shutdown()
    return out


def _json(request: Any) -> str:
    return json.dumps(request_to_dict(request), separators=(",", ":"), ensure_ascii=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: all")
    parser.add_argument("--no-root", action="store_true", help="no agent span around the loop")
    args = parser.parse_args(argv)
    if unknown := [name for name in args.scenarios if name not in BY_NAME]:
        parser.error(f"unknown scenarios {unknown}; known: {list(BY_NAME)}")
    scenarios = [BY_NAME[name] for name in args.scenarios] or list(SCENARIOS)
    for result in run_all(args.mode, scenarios, root=not args.no_root):
        sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
