"""Recording an agent framework's telemetry, for the ``<stack>_agent`` scripts.

Imports the OTel SDK, its OTLP encoders and ``sidecar.ingest.otlpjson``
(protobuf only), so every agent environment can use it. A stack script
declares its modes (environment variables set before the framework is
imported and instrumented) and one function that runs a scenario against the
scripted model; :func:`main` does the rest:

- a global tracer provider and logger provider with in-memory exporters and
  ids seeded per scenario (the same run gives the same ids);
- the scripted model (``scripted_model``) on loopback;
- one JSON object per scenario on stdout: ``{"scenario", "traces", "logs"}``,
  OTLP/JSON ``ExportTraceServiceRequest`` lines (one per trace) and
  ``ExportLogsServiceRequest`` lines (none when the mode emitted no log
  record), as a Collector's file exporter writes them.

The answer each run returns must be the scenario's scripted answer, or the
script fails: a framework that lost the thread records no trace to test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
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
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from sidecar.ingest.otlpjson import request_to_dict

from .genai_spans import PerRunIds, SeededIdGenerator, make_resource
from .refund_shop import LIVE_SCENARIOS, Scenario
from .scripted_model import scripted_model

AGENT = "refund-agent"
MODEL = "gpt-4o-mini"

# (scenario, base URL of the scripted model, tracer provider, logger provider) -> answer
RunScenario = Callable[[Scenario, str, TracerProvider, LoggerProvider], str]
# The environment each capture mode sets before the framework is imported.
Modes = Mapping[str, Mapping[str, str]]


def record(
    modes: Modes,
    mode: str,
    run: RunScenario,
    scenarios: Sequence[Scenario] = LIVE_SCENARIOS,
    *,
    cleared: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Run every scenario in ``mode`` and return its recordings (see the module docstring)."""
    for name in cleared:
        os.environ.pop(name, None)
    os.environ.update(modes[mode])
    ids = PerRunIds()
    resource = make_resource(AGENT, "2.0.0")
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON, resource=resource, id_generator=ids)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    set_logger_provider(logger_provider)
    out: list[dict[str, Any]] = []
    with scripted_model(scenarios) as base_url:
        for scenario in scenarios:
            spans.clear()
            logs.clear()
            ids.current = SeededIdGenerator(scenario.name)
            answer = run(scenario, base_url, provider, logger_provider)
            if answer.strip() != scenario.answer:
                raise RuntimeError(f"{scenario.name}: answered {answer!r}")
            by_trace: dict[int, list[Any]] = {}
            for span in spans.get_finished_spans():
                assert span.context is not None
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


def main(
    description: str,
    modes: Modes,
    run: RunScenario,
    argv: Sequence[str] | None = None,
    *,
    cleared: Sequence[str] = (),
) -> int:
    """``python -m tests.agents.<stack>_agent MODE [SCENARIO...]``: recordings on stdout."""
    by_name = {s.name: s for s in LIVE_SCENARIOS}
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("mode", choices=sorted(modes))
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: all")
    args = parser.parse_args(argv)
    if unknown := [name for name in args.scenarios if name not in by_name]:
        parser.error(f"unknown scenarios {unknown}; known: {list(by_name)}")
    scenarios = [by_name[name] for name in args.scenarios] or list(LIVE_SCENARIOS)
    for result in record(modes, args.mode, run, scenarios, cleared=cleared):
        sys.stdout.write(json.dumps(result) + "\n")
    return 0


def tool_functions(scenario: Scenario) -> list[Callable[..., Any]]:
    """The tools offered in ``scenario``: the shop's, plus its extra ones."""
    from .refund_shop import EXTRA_TOOLS, TOOLS

    return [*TOOLS, *(EXTRA_TOOLS[name] for name in scenario.extra_tools)]
