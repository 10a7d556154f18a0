"""A real google-adk 2 agent, driven by a scripted model; its traces as OTLP/JSON lines.

Runs in the ADK environment (``tests/agents/adk_env``: google-adk 2.13, which
needs google-genai 2.x), never in the project's, so of sidecar it may import
only ``sidecar.ingest.otlpjson`` (protobuf only). From the repository root::

    $SIDECAR_ADK_PYTHON -m tests.agents.adk_agent [--out FILE] [--capture MODE]
        [--logs-out FILE] [SCENARIO ...]

writes one ``ExportTraceServiceRequest`` per line (OTLP/JSON as the Collector's
file exporter writes it), one per scenario, in the order asked (default: all
of ``refund_shop.SCENARIOS``). With ``--logs-out`` the log records ADK emitted
go to that file the same way, one ``ExportLogsServiceRequest`` line per
scenario (``{}`` for a run that emitted none). ``adk_traces`` runs it for the
tests.

With ``--sessions``, the names are of ``refund_shop.SESSIONS``: each session's
turns run one after another in one ADK session (one session service, so the
model sees the earlier turns), each turn its own invocation and trace, a
minute apart; one line per turn, in order.

Everything from the runner down is ADK's own code (``InMemoryRunner``,
``LlmAgent``, function tools, ADK's telemetry); only the model is replaced by
:class:`ScriptedModel`, which answers from a script instead of the network.

Telemetry is configured the way an ADK user does it. ADK's tracers are
``trace.get_tracer("gcp.vertex.agent")`` proxies of the global tracer
provider, and its event logger a proxy of the global logger provider, so
:func:`main` sets both once; every run gets ids from its own seeded generator,
and its spans and log records are taken from in-memory exporters. Environment
:func:`main` sets before the first run (ADK reads it when a run starts):

- ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` from ``--capture``
  (:data:`CAPTURE_MODES`): ``SPAN_ONLY`` (the default here) puts messages,
  tool arguments and results on the spans; ``EVENT_ONLY`` puts the messages on
  ``gen_ai.client.inference.operation.details`` log records and none on the
  spans; ``SPAN_AND_EVENT`` both; ``default`` leaves it unset, ADK's default:
  no content anywhere (the log records still come, without content).
- ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1`` with ``--schema 1``: ADK's legacy
  schema, its per-message log records holding ``{"content": <elided> or a
  Gemini Content}``; ``--schema 1-no-span-content`` adds
  ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false`` (``"{}"`` for tool arguments
  and results on the spans);
- removed otherwise, so ADK's defaults are what is traced (schema version 2, GenAI
  semconv 1.44): ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN``,
  ``OTEL_SEMCONV_STABILITY_OPT_IN``, ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS``,
  ``ADK_TELEMETRY_IGNORE_RUN_CONFIG``, ``ADK_EXPERIMENTAL_TELEMETRY``,
  ``ADK_EXPERIMENTAL_TELEMETRY_FEATURES``, ``OTEL_SDK_DISABLED``.

Spans as ADK 2.13 names them (all INTERNAL, scope ``gcp.vertex.agent``)::

    invoke_workflow refund_agent            gen_ai.workflow.name, gen_ai.conversation.id
      invoke_agent refund_agent             gen_ai.agent.name, gen_ai.agent.description
        generate_content gemini-2.5-flash   gen_ai.input.messages / output.messages, usage
        execute_tool lookup_order           gen_ai.tool.call.id / arguments / result
        generate_content gemini-2.5-flash
        ...

Runs are reproducible: ids come from a generator seeded with the scenario
name, timestamps are moved onto a fixed timeline and the random UUIDs ADK puts
in attributes (invocation and event ids) are renumbered, so a scenario gives
the same bytes whatever else the process ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import uuid
import warnings
import zlib
from collections.abc import AsyncGenerator, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass
from typing import Any

from opentelemetry import _logs, trace
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import Event, ReadableSpan
from pydantic import Field

from sidecar.ingest.otlpjson import request_to_json_line

from .genai_spans import DEMO_EPOCH_NS, PerRunIds, Recorder, SeededIdGenerator, recorder
from .otlp import json_line
from .refund_shop import (
    BY_NAME,
    EXTRA_TOOLS,
    INSTRUCTION,
    MODEL,
    SCENARIOS,
    SESSIONS,
    TOOLS,
    Scenario,
)

with warnings.catch_warnings():
    # Importing ADK pulls in vertexai and google-cloud-aiplatform, which warn at
    # import time (FutureWarning, pydantic deprecations); not ours to fix.
    warnings.simplefilter("ignore")
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner, Runner
    from google.adk.sessions import BaseSessionService
    from google.genai import types

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# --capture value -> the variable's value (None: unset, ADK's default of no content).
CAPTURE_MODES: dict[str, str | None] = {
    "SPAN_ONLY": "SPAN_ONLY",
    "EVENT_ONLY": "EVENT_ONLY",
    "SPAN_AND_EVENT": "SPAN_AND_EVENT",
    "default": None,
}
TELEMETRY_ENV_REMOVED = (
    "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN",
    "OTEL_SEMCONV_STABILITY_OPT_IN",
    "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS",
    "ADK_TELEMETRY_IGNORE_RUN_CONFIG",
    "ADK_EXPERIMENTAL_TELEMETRY",
    "ADK_EXPERIMENTAL_TELEMETRY_FEATURES",
    "OTEL_SDK_DISABLED",
)

# --- the scripted model ---------------------------------------------------------------------


class ScriptedModel(BaseLlm):
    """A BaseLlm that replays canned responses: function calls first, then the answer.

    It checks that ADK really sent the previous tool result back before it
    moves on, so the agent loop is exercised and not just stepped through.
    """

    responses: list[LlmResponse] = Field(default_factory=list)
    position: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if self.position >= len(self.responses):
            raise RuntimeError(f"script exhausted after {self.position} model calls")
        if self.position > 0:
            last = llm_request.contents[-1]
            if not any(part.function_response for part in last.parts or []):
                raise RuntimeError("expected the previous tool result as the last content")
        response = self.responses[self.position]
        self.position += 1
        prompt = json.dumps(
            [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
        )
        reply = response.model_dump_json(exclude_none=True)
        yield response.model_copy(
            update={
                "usage_metadata": types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=len(prompt) // 4 + 120,  # + system prompt and tools
                    candidates_token_count=max(1, len(reply) // 4),
                )
            }
        )


def script_for(scenario: Scenario) -> list[LlmResponse]:
    responses = [
        LlmResponse(
            content=types.Content(
                role="model",
                parts=[
                    types.Part(
                        function_call=types.FunctionCall(
                            id=f"call-{index + 1}", name=name, args=args
                        )
                    )
                ],
            ),
            finish_reason=types.FinishReason.STOP,
        )
        for index, (name, args) in enumerate(scenario.calls)
    ]
    responses.append(
        LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=scenario.answer)]),
            finish_reason=types.FinishReason.STOP,
        )
    )
    return responses


def build_agent(scenario: Scenario) -> LlmAgent:
    return LlmAgent(
        name="refund_agent",
        description="Answers order questions and issues refunds.",
        model=ScriptedModel(model=MODEL, responses=script_for(scenario)),
        instruction=INSTRUCTION,
        tools=[*TOOLS, *(EXTRA_TOOLS[name] for name in scenario.extra_tools)],
    )


# --- running and tracing ----------------------------------------------------------------------


@dataclass
class Run:
    """One scenario's telemetry, normalised: its spans (root last) and its log records."""

    spans: list[ReadableSpan]
    logs: list[ReadableLogRecord]


async def run_scenario(
    scenario: Scenario,
    rec: Recorder,
    logs: InMemoryLogRecordExporter,
    ids: PerRunIds,
    start_ns: int,
    sessions: BaseSessionService | None = None,
) -> Run:
    """Run the agent once on ``scenario``; its spans (root last) and log records, normalised.

    ``sessions``: a session service that already holds the scenario's session
    (a later turn of it); by default a fresh in-memory one with a new session.
    """
    rec.exporter.clear()
    logs.clear()
    ids.current = SeededIdGenerator(zlib.crc32(scenario.name.encode()))
    app = rec.provider.resource.attributes["service.name"]
    assert isinstance(app, str)
    runner: Runner
    if sessions is None:
        runner = InMemoryRunner(agent=build_agent(scenario), app_name=app)
        await runner.session_service.create_session(
            app_name=app, user_id=scenario.user_id, session_id=scenario.session_id
        )
    else:
        runner = Runner(app_name=app, agent=build_agent(scenario), session_service=sessions)
    message = types.Content(role="user", parts=[types.Part(text=scenario.user_input)])
    async for _event in runner.run_async(
        user_id=scenario.user_id, session_id=scenario.session_id, new_message=message
    ):
        pass
    await runner.close()
    spans = rec.spans()
    if not spans:
        raise RuntimeError("ADK recorded no spans; has its tracer stopped using the global one?")
    return normalize(spans, list(logs.get_finished_logs()), start_ns, scenario.name)


# --- making a run reproducible ---------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TICK_NS = 120_000_000  # 120 ms between consecutive span boundaries


def normalize(
    spans: Sequence[ReadableSpan], logs: Sequence[ReadableLogRecord], start_ns: int, salt: str
) -> Run:
    """Rebuild spans on a fixed timeline from ``start_ns``, order and nesting kept, UUIDs renumbered.

    A log record is put at the instant of the last span boundary before it was
    emitted (it is emitted while its span is open), so it stays inside its span.
    """
    instants = sorted(
        {t for s in spans for t in (s.start_time, s.end_time) if t is not None}
        | {e.timestamp for s in spans for e in s.events}
    )
    retime = {t: start_ns + rank * _TICK_NS for rank, t in enumerate(instants)}
    renamed: dict[str, str] = {}

    def stable_uuid(match: re.Match[str]) -> str:
        found = match.group(0)
        if found not in renamed:
            renamed[found] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{salt}/{len(renamed)}"))
        return renamed[found]

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            return _UUID.sub(stable_uuid, value)
        if isinstance(value, tuple | list):
            return tuple(fix(v) for v in value)
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    # Renumber in start order so the numbering does not depend on end order.
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        for value in (span.attributes or {}).values():
            fix(value)
    new_spans = [
        ReadableSpan(
            name=s.name,
            context=s.context,
            parent=s.parent,
            resource=s.resource,
            attributes={k: fix(v) for k, v in (s.attributes or {}).items()},
            events=tuple(
                Event(
                    e.name,
                    {k: fix(v) for k, v in (e.attributes or {}).items()},
                    retime[e.timestamp],
                )
                for e in s.events
            ),
            links=s.links,
            kind=s.kind,
            status=s.status,
            start_time=retime[s.start_time] if s.start_time is not None else None,
            end_time=retime[s.end_time] if s.end_time is not None else None,
            instrumentation_scope=s.instrumentation_scope,
        )
        for s in spans
    ]
    new_logs = []
    for index, log in enumerate(logs):
        record = log.log_record
        emitted = record.timestamp or record.observed_timestamp or 0
        before = [t for t in instants if t <= emitted]
        at = (retime[before[-1]] if before else start_ns) + index
        new_logs.append(
            ReadableLogRecord(
                LogRecord(
                    timestamp=at,
                    observed_timestamp=at,
                    trace_id=record.trace_id,
                    span_id=record.span_id,
                    trace_flags=record.trace_flags,
                    severity_text=record.severity_text,
                    severity_number=record.severity_number,
                    body=fix(record.body),
                    attributes={k: fix(v) for k, v in (record.attributes or {}).items()},
                    event_name=record.event_name,
                ),
                resource=log.resource,
                instrumentation_scope=log.instrumentation_scope,
            )
        )
    return Run(new_spans, new_logs)


# --- command line -----------------------------------------------------------------------------


async def run_all(
    scenarios: Sequence[Scenario], service: str, version: str, start_ns: int
) -> list[Run]:
    ids = PerRunIds()
    rec, logs, log_provider = _telemetry(service, version, ids)
    try:
        return [await run_scenario(s, rec, logs, ids, start_ns) for s in scenarios]
    finally:
        rec.provider.shutdown()
        log_provider.shutdown()


def _telemetry(
    service: str, version: str, ids: PerRunIds
) -> tuple[Recorder, InMemoryLogRecordExporter, LoggerProvider]:
    """The global tracer and logger providers, recording into memory."""
    rec = recorder(service, version, id_generator=ids)
    trace.set_tracer_provider(rec.provider)
    logs = InMemoryLogRecordExporter()
    log_provider = LoggerProvider(resource=rec.provider.resource, shutdown_on_exit=False)
    log_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    _logs.set_logger_provider(log_provider)
    return rec, logs, log_provider


def logs_line(logs: Sequence[ReadableLogRecord]) -> str:
    """One ExportLogsServiceRequest as a line of OTLP/JSON (``{}`` when there are none)."""
    return request_to_json_line(encode_logs(logs)) if logs else "{}"


def _write(path: str, lines: Sequence[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)


_TURN_GAP_NS = 60_000_000_000  # a minute between the turns of a session


async def run_sessions(
    names: Sequence[str], service: str, version: str, start_ns: int
) -> list[Run]:
    """Every turn of each named session, in order, each turn in the same ADK session."""
    ids = PerRunIds()
    rec, logs, log_provider = _telemetry(service, version, ids)
    runs: list[Run] = []
    try:
        for name in names:
            turns = SESSIONS[name]
            first = InMemoryRunner(agent=build_agent(turns[0]), app_name=service)
            shared = first.session_service
            await shared.create_session(
                app_name=service, user_id=turns[0].user_id, session_id=turns[0].session_id
            )
            for number, turn in enumerate(turns):
                at = start_ns + number * _TURN_GAP_NS
                runs.append(await run_scenario(turn, rec, logs, ids, at, shared))
            await first.close()
    finally:
        rec.provider.shutdown()
        log_provider.shutdown()
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: all")
    parser.add_argument("--out", default="-", help="file to write (default: stdout)")
    parser.add_argument("--logs-out", help="file for the log records (default: not written)")
    parser.add_argument(
        "--capture",
        choices=list(CAPTURE_MODES),
        default="SPAN_ONLY",
        help=f"{CAPTURE_ENV} ('default': unset)",
    )
    parser.add_argument(
        "--schema",
        choices=["2", "1", "1-no-span-content"],
        default="2",
        help="ADK's telemetry schema: 2 (its default) or 1 (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1;"
        " 1-no-span-content: with ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false)",
    )
    parser.add_argument("--service", default="refund-agent", help="service.name")
    parser.add_argument("--service-version", default="1.4.2", help="service.version")
    parser.add_argument("--start-ns", type=int, default=DEMO_EPOCH_NS, help="first timestamp")
    parser.add_argument("--sessions", action="store_true", help="the names are multi-turn sessions")
    args = parser.parse_args(argv)
    known = SESSIONS if args.sessions else BY_NAME
    if unknown := [name for name in args.scenarios if name not in known]:
        parser.error(f"unknown names {unknown}; known: {list(known)}")

    for name in (CAPTURE_ENV, *TELEMETRY_ENV_REMOVED):
        os.environ.pop(name, None)
    if (mode := CAPTURE_MODES[args.capture]) is not None:
        os.environ[CAPTURE_ENV] = mode
    if args.schema == "1-no-span-content":
        os.environ["ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS"] = "false"
    if args.schema.startswith("1"):
        # The legacy schema (supported by ADK until 2027-03-31): gcp.vertex.agent.* span
        # attributes, and one gen_ai.* log record per message with a Gemini Content body.
        os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"
    # Anything ADK prints goes to stderr; stdout is for the OTLP lines only.
    with redirect_stdout(sys.stderr):
        if args.sessions:
            names = args.scenarios or list(SESSIONS)
            runs = asyncio.run(
                run_sessions(names, args.service, args.service_version, args.start_ns)
            )
        else:
            scenarios = [BY_NAME[name] for name in args.scenarios] or list(SCENARIOS)
            runs = asyncio.run(
                run_all(scenarios, args.service, args.service_version, args.start_ns)
            )
    _write(args.out, [json_line(run.spans) for run in runs])
    if args.logs_out:
        _write(args.logs_out, [logs_line(run.logs) for run in runs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
