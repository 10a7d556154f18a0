"""The refund agent on pydantic-ai, traced by pydantic-ai's own OpenTelemetry instrumentation.

Runs in its own environment (``tests/agents/pydantic_ai_env``, made by
``scripts/bootstrap pydantic-ai``); no logfire: ``Agent(instrument=
InstrumentationSettings(...)`` set on the agent, on the recording's tracer provider. From the
repository root::

    $SIDECAR_PYDANTIC_AI_PYTHON -m tests.agents.pydantic_ai_agent MODE

MODES (the ``InstrumentationSettings`` each uses):

- ``v5``: the default data format (version 5): ``gen_ai.input.messages`` /
  ``gen_ai.output.messages`` on the model request spans,
  ``pydantic_ai.all_messages`` and ``final_result`` on the agent run span,
  ``tool_arguments`` / ``tool_response`` on the tool spans;
- ``v6``: version 6 (tool results in ``role: tool`` messages);
- ``no-content``: version 5 with ``include_content=False``;
- ``structured``: version 5, the agent with an output type: the model answers
  by calling the output tool ``final_result``, no chat span carries the answer
  as text, and ``final_result`` on the agent run span holds it as JSON.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from .recording import AGENT, MODEL, main, tool_functions
from .refund_shop import INSTRUCTION, Scenario

MODES = {"v5": {}, "v6": {}, "no-content": {}, "structured": {}}
_SETTINGS = {
    "v5": {"version": 5},
    "v6": {"version": 6},
    "no-content": {"version": 5, "include_content": False},
    "structured": {"version": 5},
}
_mode = "v5"


def run(scenario: Scenario, base_url: str, provider: TracerProvider, _: LoggerProvider) -> str:
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    class Reply(BaseModel):
        answer: str

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="test-key"))
    agent = Agent(
        model,
        name=AGENT,
        instructions=INSTRUCTION,
        tools=tool_functions(scenario),
        output_type=Reply if _mode == "structured" else str,
    )
    agent.instrument = InstrumentationSettings(tracer_provider=provider, **_SETTINGS[_mode])  # type: ignore[arg-type]
    result = agent.run_sync(scenario.user_input)
    output = result.output
    return output.answer if isinstance(output, Reply) else str(output)


def cli(argv: Sequence[str] | None = None) -> int:
    global _mode
    args = list(sys.argv[1:] if argv is None else argv)
    _mode = args[0] if args else _mode
    return main(__doc__.splitlines()[0], MODES, run, args)


if __name__ == "__main__":
    sys.exit(cli())
