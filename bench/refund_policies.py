"""One refund rubric, written twice: for the sidecar and as Collector tail_sampling policies.

``RUBRIC`` is the sidecar's rubric of four checks (tool allowlist, argument
schema, required calls in order, grounded numbers). ``TAIL_SAMPLING`` is the
same intent written as the OpenTelemetry Collector's ``tail_sampling``
processor policies (contrib ``processor/tailsamplingprocessor``), which keep a
trace when any policy matches, so each policy says "this trace breaks a rule":

- ``tool_allowlist``: a tool span whose tool is not in the allowlist (OTTL);
- ``refund_arguments``: an ``issue_refund`` span whose JSON arguments lack
  ``order_id`` or ``amount`` or ask for more than 500 (OTTL ``ParseJSON``);
- ``refund_issued`` / ``order_looked_up``: ``not`` of "some span calls the
  tool", the presence half of "required calls in order" (a policy sees one span
  at a time, so the order of two spans cannot be written);
- ``grounded_amount``: on the model call that wrote the answer, the answer's
  dollar amount (its whole part and the point, by regex) does not occur in the
  prompt that call saw, which holds the tool results: an approximation of
  ``grounded_numbers``, which compares every number of the answer with the
  tools' inputs and outputs;
- ``errors`` and ``slow``: an ERROR span, a trace longer than 30 s: the two
  policies every tail-sampling setup has; the rubric has no such checks, so
  these traces are kept by the Collector and passed by the sidecar.

:func:`collector_config` writes the Collector configurations of the benchmark:
the kafka receiver alone (decode only), with ``groupbytrace``, and with
``tail_sampling``, each into the debug exporter.
"""

from __future__ import annotations

RUBRIC = """
id: bench-refund
version: "1"
description: Refund agent, four deterministic checks (the judge is off).
checks:
  - {name: allowed_tools, type: tool_allowlist, tools: [lookup_order, issue_refund]}
  - name: refund_args
    type: tool_arguments
    tool: issue_refund
    schema: {type: object, required: [order_id, amount], properties: {amount: {type: number, maximum: 500}}}
  - name: lookup_before_refund
    type: required_tool_calls
    order: in_order
    calls: [{name: lookup_order}, {name: issue_refund}]
  - {name: amount_grounded, type: grounded_numbers}
"""

# The Collector's tail_sampling decision loop runs once a second (not configurable:
# the processor's tickerFrequency); a trace is decided at the first tick after
# DECISION_WAIT has passed since its first span.
DECISION_WAIT = "1s"

_TOOL = 'span.attributes["gen_ai.tool.name"]'
_ARGS = 'ParseJSON(span.attributes["gen_ai.tool.call.arguments"])'
_OUT = 'span.attributes["gen_ai.output.messages"]'
_IN = 'span.attributes["gen_ai.input.messages"]'
_WHOLE = f'ExtractPatterns({_OUT}, "\\\\$(?P<whole>[0-9]+)\\\\.")["whole"]'


def _ottl(name: str, *conditions: str) -> str:
    lines = "".join(f"\n            - {_yaml_str(c)}" for c in conditions)
    return f"""
      - name: {name}
        type: ottl_condition
        ottl_condition:
          error_mode: ignore
          span:{lines}"""


def _absent(name: str, tool: str) -> str:
    return f"""
      - name: {name}
        type: not
        not:
          not_sub_policy:
            name: {name}_present
            type: ottl_condition
            ottl_condition:
              error_mode: ignore
              span: [{_yaml_str(f'{_TOOL} == "{tool}"')}]"""


def _yaml_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


TAIL_SAMPLING_POLICIES = "".join(
    [
        _ottl(
            "tool_allowlist",
            'span.attributes["gen_ai.operation.name"] == "execute_tool" and '
            f'not IsMatch({_TOOL}, "^(lookup_order|issue_refund)$")',
        ),
        _ottl(
            "refund_arguments",
            f'{_TOOL} == "issue_refund" and {_ARGS}["order_id"] == nil',
            f'{_TOOL} == "issue_refund" and {_ARGS}["amount"] == nil',
            f'{_TOOL} == "issue_refund" and {_ARGS}["amount"] > 500',
        ),
        _absent("refund_issued", "issue_refund"),
        _absent("order_looked_up", "lookup_order"),
        _ottl(
            "grounded_amount",
            'span.attributes["gen_ai.operation.name"] == "chat" and '
            f'IsMatch({_OUT}, "\\\\$[0-9]+\\\\.") and '
            f'Index({_IN}, Concat([{_WHOLE}, "."], "")) == -1',
        ),
        """
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
      - {name: slow, type: latency, latency: {threshold_ms: 30000}}""",
    ]
)

# What each Collector reader is, and the metric that says it has finished.
COLLECTOR_READERS = {
    "raw": "Collector kafkareceiver",
    "groupbytrace": "Collector groupbytrace",
    "tail_sampling": "Collector tail_sampling",
}


def collector_config(
    kind: str, bootstrap: str, topic: str, group: str, port: int, traces: int
) -> str:
    """The Collector configuration of one reader: ``raw``, ``groupbytrace`` or ``tail_sampling``."""
    processors = {
        "raw": "",
        # Every trace is held for wait_duration, then released downstream as one batch.
        "groupbytrace": f"""
  groupbytrace:
    wait_duration: 1s
    num_traces: {max(2 * traces, 1000)}
    num_workers: 1""",
        "tail_sampling": f"""
  tail_sampling:
    decision_wait: {DECISION_WAIT}
    num_traces: {max(2 * traces, 1000)}
    expected_new_traces_per_sec: {max(traces, 100)}
    policies:{TAIL_SAMPLING_POLICIES}""",
    }[kind]
    chain = f"\n      processors: [{kind}]" if processors else ""
    return f"""
receivers:
  kafka:
    brokers: ["{bootstrap}"]
    group_id: {group}
    initial_offset: earliest
    traces:
      topics: ["{topic}"]
      encoding: otlp_proto
{"processors:" + processors if processors else ""}
exporters:
  debug:
    verbosity: basic
service:
  telemetry:
    logs: {{level: warn}}
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus: {{host: 127.0.0.1, port: {port}}}
  pipelines:
    traces:
      receivers: [kafka]{chain}
      exporters: [debug]
"""
