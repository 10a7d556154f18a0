"""The refund agent on the OpenAI Agents SDK, traced by OpenInference's processor for it.

Runs in its own environment (``tests/agents/openai_agents_env``, made by
``scripts/bootstrap openai-agents``). The SDK's own trace export is off
(``set_tracing_export_api_key`` is never called and its processors are
replaced): ``openinference-instrumentation-openai-agents`` turns the SDK's
traces into OTel spans on the recording's tracer provider. The model is the
SDK's chat-completions model on the scripted model. From the repository root::

    $SIDECAR_OPENAI_AGENTS_PYTHON -m tests.agents.openai_agents_agent MODE

MODES:

- ``oi``: OpenInference's defaults: content on (``llm.input_messages.*``,
  ``llm.output_messages.*``, tool ``input.value`` / ``output.value``);
- ``oi-hidden``: ``OPENINFERENCE_HIDE_INPUTS`` and ``OPENINFERENCE_HIDE_OUTPUTS``.
"""

from __future__ import annotations

import asyncio
import sys

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from .recording import AGENT, MODEL, main, tool_functions
from .refund_shop import INSTRUCTION, Scenario

_HIDE = ("OPENINFERENCE_HIDE_INPUTS", "OPENINFERENCE_HIDE_OUTPUTS")
MODES = {"oi": {}, "oi-hidden": dict.fromkeys(_HIDE, "true")}
_instrumented: list[bool] = []


def run(scenario: Scenario, base_url: str, provider: TracerProvider, _: LoggerProvider) -> str:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    if not _instrumented:
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
        _instrumented.append(True)
    client = AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    agent = Agent(
        name=AGENT,
        instructions=INSTRUCTION,
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        tools=[function_tool(f) for f in tool_functions(scenario)],
    )
    result = asyncio.run(Runner.run(agent, scenario.user_input))
    return str(result.final_output)


if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], MODES, run, cleared=_HIDE))
