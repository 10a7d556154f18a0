"""The refund agent on LangGraph, traced by OpenLLMetry's or OpenInference's LangChain instrumentation.

Runs in its own environment (``tests/agents/langgraph_env``, made by
``scripts/bootstrap langgraph``): LangGraph's prebuilt ReAct agent on
``langchain-openai``'s ``ChatOpenAI``, against the scripted model. From the
repository root::

    $SIDECAR_LANGGRAPH_PYTHON -m tests.agents.langgraph_agent MODE

MODES:

- ``traceloop``: ``opentelemetry-instrumentation-langchain`` (OpenLLMetry)
  with its defaults: content as span attributes (``gen_ai.input.messages``,
  ``gen_ai.output.messages`` on the chat spans, ``traceloop.entity.input`` /
  ``output`` on the workflow, task and tool spans);
- ``traceloop-events``: the same with ``use_attributes=False``: the chat
  spans' messages as OTLP log records (``gen_ai.user.message``,
  ``gen_ai.choice``, ...), emitted from LangChain callbacks;
- ``traceloop-off``: ``TRACELOOP_TRACE_CONTENT=false``;
- ``oi``: ``openinference-instrumentation-langchain``, content on;
- ``oi-hidden``: the same with ``OPENINFERENCE_HIDE_INPUTS`` and
  ``OPENINFERENCE_HIDE_OUTPUTS``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from .recording import AGENT, MODEL, main, tool_functions
from .refund_shop import INSTRUCTION, Scenario

_CLEARED = ("TRACELOOP_TRACE_CONTENT", "OPENINFERENCE_HIDE_INPUTS", "OPENINFERENCE_HIDE_OUTPUTS")
MODES = {
    "traceloop": {},
    "traceloop-events": {},
    "traceloop-off": {"TRACELOOP_TRACE_CONTENT": "false"},
    "oi": {},
    "oi-hidden": {"OPENINFERENCE_HIDE_INPUTS": "true", "OPENINFERENCE_HIDE_OUTPUTS": "true"},
}
_mode: list[str] = []


def _instrument(mode: str, provider: TracerProvider, logger_provider: LoggerProvider) -> None:
    if mode.startswith("traceloop"):
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor(use_attributes=mode != "traceloop-events").instrument(
            tracer_provider=provider, logger_provider=logger_provider
        )
    else:
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)


def run(
    scenario: Scenario, base_url: str, provider: TracerProvider, logger_provider: LoggerProvider
) -> str:
    if len(_mode) == 1:
        _instrument(_mode[0], provider, logger_provider)
        _mode.append("instrumented")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    with warnings.catch_warnings():
        # create_react_agent is what LangGraph users run; its successor lives in `langchain`.
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        agent = create_react_agent(
            ChatOpenAI(model=MODEL, base_url=base_url, api_key="test-key", max_retries=0),  # type: ignore[arg-type]
            [tool(f) for f in tool_functions(scenario)],
            prompt=INSTRUCTION,
            name=AGENT,
        )
    state = agent.invoke({"messages": [("user", scenario.user_input)]})
    return str(state["messages"][-1].content)


def cli(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in MODES:
        _mode.append(args[0])
    return main(__doc__.splitlines()[0], MODES, run, args, cleared=_CLEARED)


if __name__ == "__main__":
    sys.exit(cli())
