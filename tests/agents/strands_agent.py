"""The refund agent on Strands Agents, traced by Strands' built-in OpenTelemetry tracing.

Runs in its own environment (``tests/agents/strands_env``, made by
``scripts/bootstrap strands``), with Strands' OpenAI model provider against
the scripted model (streamed chat completions). Strands keeps its
conversation as Bedrock Converse content blocks (``{"text"}``,
``{"toolUse"}``, ``{"toolResult"}``) whatever the provider, and records them
so. From the repository root::

    $SIDECAR_STRANDS_PYTHON -m tests.agents.strands_agent MODE

MODES (``OTEL_SEMCONV_STABILITY_OPT_IN`` each sets):

- ``events``: unset, Strands' default: content in span events
  (``gen_ai.user.message``, ``gen_ai.assistant.message``,
  ``gen_ai.tool.message``, ``gen_ai.choice``) holding content-block JSON;
  tool arguments and results in ``gen_ai.tool.message`` / ``gen_ai.choice``
  events keyed by the tool-use ``id``;
- ``latest``: ``gen_ai_latest_experimental``: one
  ``gen_ai.client.inference.operation.details`` span event per span with
  ``gen_ai.input.messages`` / ``gen_ai.output.messages``, and the tool
  arguments and results as ``gen_ai.tool.call.*`` attributes;
- ``latest-attributes``: ``gen_ai_latest_experimental,gen_ai_span_attributes_only``:
  the same content as span attributes;
- ``redacted``: ``gen_ai_latest_experimental,gen_ai_unredacted_attributes=``:
  every content value replaced by ``[REDACTED]``.
"""

from __future__ import annotations

import sys

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from .recording import AGENT, MODEL, main, tool_functions
from .refund_shop import INSTRUCTION, Scenario

_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
MODES = {
    "events": {},
    "latest": {_OPT_IN: "gen_ai_latest_experimental"},
    "latest-attributes": {_OPT_IN: "gen_ai_latest_experimental,gen_ai_span_attributes_only"},
    "redacted": {_OPT_IN: "gen_ai_latest_experimental,gen_ai_unredacted_attributes="},
}


def run(scenario: Scenario, base_url: str, _: TracerProvider, __: LoggerProvider) -> str:
    # Strands' tracer reads the global tracer provider the recording set.
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    model = OpenAIModel(client_args={"base_url": base_url, "api_key": "test-key"}, model_id=MODEL)
    agent = Agent(
        model=model,
        name=AGENT,
        system_prompt=INSTRUCTION,
        tools=[tool(f) for f in tool_functions(scenario)],
        callback_handler=None,
    )
    return str(agent(scenario.user_input))


if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], MODES, run, cleared=(_OPT_IN,)))
