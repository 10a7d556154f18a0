"""Hostile rubric files: regexes that backtrack, schemas that fetch, YAML that explodes.

Each case is refused when the rubric is loaded, with the file and the field
named, or runs in bounded time; nothing is ever fetched.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.errors import RubricError
from sidecar.evaluate.checks import run_check
from sidecar.evaluate.checks.answer import AnswerRegex
from sidecar.evaluate.checks.tools import ToolArguments
from sidecar.evaluate.rubric import Rubric, load_rubric, parse_rubric
from sidecar.model import Outcome, ToolCall, Transcript

FILE = Path("rubrics/hostile.yaml")
CATASTROPHIC = "(a+)+$"
VICTIM = "a" * 31 + "!"


def rubric_text(*checks: dict[str, Any], **extra: Any) -> str:
    return yaml.safe_dump({"id": "hostile", "version": "1", "checks": list(checks), **extra})


def loaded(*checks: dict[str, Any]) -> Rubric:
    return parse_rubric(rubric_text(*checks), FILE)


def refused(text: str) -> str:
    with pytest.raises(RubricError) as caught:
        parse_rubric(text, FILE)
    return str(caught.value)


def transcript(answer: str | None = "Done.", *calls: ToolCall) -> Transcript:
    return Transcript(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        root_span_id="b7ad6b7169203331",
        user_input="help",
        answer=answer,
        tool_calls=calls,
    )


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


# --- regexes: linear time, RE2 syntax checked at load --------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("field", ["must_match", "must_not_match"])
def test_catastrophic_answer_regex_runs_in_milliseconds(field: str) -> None:
    rubric = loaded({"name": "r", "type": "answer_regex", field: CATASTROPHIC})
    result, seconds = timed(run_check, rubric.checks[0], transcript(VICTIM))
    assert result.outcome is (Outcome.FAIL if field == "must_match" else Outcome.PASS)
    assert seconds < 0.5, f"{seconds:.3f}s"


@pytest.mark.timeout(30)
def test_catastrophic_schema_pattern_runs_in_milliseconds() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(x+)+$": {"type": "string"}},
    }
    rubric = loaded({"name": "args", "type": "tool_arguments", "tool": "t", "schema": schema})
    arguments = f'{{"code": "{VICTIM}", "{"x" * 31}!": 1}}'
    call = ToolCall(name="t", arguments=arguments, result="ok")
    result, seconds = timed(run_check, rubric.checks[0], transcript("Done.", call))
    assert result.outcome is Outcome.FAIL
    assert "does not match" in result.detail
    assert seconds < 0.5, f"{seconds:.3f}s"


@pytest.mark.parametrize(
    ("field", "pattern"),
    [
        pytest.param("must_match", r"(\w+) \1", id="backreference"),
        pytest.param("must_not_match", r"refund(?= of)", id="lookahead"),
        pytest.param("must_match", r"(?<!no )refund", id="lookbehind"),
    ],
)
def test_regex_that_cannot_run_in_linear_time_is_refused(field: str, pattern: str) -> None:
    message = refused(rubric_text({"name": "r", "type": "answer_regex", field: pattern}))
    assert message.startswith(f"{FILE}: checks.0.answer_regex: Value error, regular expression")
    assert f"in {field} is not supported by the linear-time engine" in message


def test_schema_pattern_that_cannot_run_in_linear_time_is_refused() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": r"(a)\1"}}}
    message = refused(
        rubric_text({"name": "args", "type": "tool_arguments", "tool": "t", "schema": schema})
    )
    assert f"{FILE}: checks.0.tool_arguments.schema: Value error" in message
    assert "in #/properties/code/pattern is not supported by the linear-time engine" in message


@pytest.mark.parametrize(
    ("spec", "answer", "outcome"),
    [
        pytest.param({"must_match": r"refund of \$\d+"}, "Your refund of $40.", "PASS", id="match"),
        pytest.param({"must_match": "REFUND", "ignore_case": True}, "refund", "PASS", id="nocase"),
        pytest.param({"must_match": "REFUND"}, "refund", "FAIL", id="case"),
        pytest.param({"must_match": r"\pL+é"}, "café", "PASS", id="unicode-class"),
        pytest.param({"must_not_match": r"\b\d{16}\b"}, "card 4111111111111111", "FAIL", id="card"),
    ],
)
def test_re2_patterns_keep_their_meaning(spec: dict[str, Any], answer: str, outcome: str) -> None:
    rubric = loaded({"name": "r", "type": "answer_regex", **spec})
    assert run_check(rubric.checks[0], transcript(answer)).outcome is Outcome(outcome)


def test_regex_built_without_validation_is_an_error_not_a_crash() -> None:
    spec = AnswerRegex.model_construct(
        name="r", type="answer_regex", must_match=r"(a)\1", must_not_match=None, ignore_case=False
    )
    result = run_check(spec, transcript("aa"))
    assert result.outcome is Outcome.ERROR
    assert "RE2 cannot compile" in result.detail


# --- schemas: references only inside the rubric, nothing fetched ---------------------


class _Counting(http.server.BaseHTTPRequestHandler):
    requests: list[str]

    def do_GET(self) -> None:
        self.requests.append(self.path)
        body = b'{"type": "object", "secret": "FROM-THE-NETWORK"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def _server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Counting,), {"requests": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def counting_server(_server: tuple[str, list[str]]) -> tuple[str, list[str]]:
    """A local HTTP server that counts the requests it gets (reset per test)."""
    _server[1].clear()
    return _server


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.json"
    path.write_text('{"type": "object", "description": "LOCAL-FILE-SECRET"}', encoding="utf-8")
    return path


def _schemas(base_url: str, secret: Path) -> list[tuple[str, dict[str, Any], str]]:
    # (id, schema, the JSON pointer the message names)
    return [
        ("http", {"$ref": f"{base_url}/refund.json"}, "#"),
        ("https", {"$ref": "https://schemas.example/refund.json"}, "#"),
        ("file", {"$ref": secret.as_uri()}, "#"),
        ("relative", {"$ref": "refund.json#/$defs/amount"}, "#"),
        ("urn", {"$ref": "urn:example:refund"}, "#"),
        (
            "nested",
            {"type": "object", "properties": {"amount": {"$ref": f"{base_url}/amount.json"}}},
            "#/properties/amount",
        ),
        ("dynamic", {"$dynamicRef": f"{base_url}/meta#node"}, "#"),
        ("in-defs", {"$defs": {"a": {"$ref": secret.as_uri()}}, "$ref": "#/$defs/a"}, "#/$defs/a"),
    ]


@pytest.mark.parametrize("case", range(8), ids=[s[0] for s in _schemas("", Path("/x"))])
@pytest.mark.parametrize("check_type", ["tool_arguments", "answer_json_schema"])
def test_foreign_reference_is_a_load_error_and_nothing_is_fetched(
    case: int,
    check_type: str,
    counting_server: tuple[str, list[str]],
    secret_file: Path,
) -> None:
    base_url, requests = counting_server
    _, schema, pointer = _schemas(base_url, secret_file)[case]
    check: dict[str, Any] = {"name": "c", "type": check_type, "schema": schema}
    if check_type == "tool_arguments":
        check["tool"] = "t"
    message = refused(rubric_text(check))
    assert f"{FILE}: checks.0.{check_type}.schema: Value error" in message
    assert f"at {pointer}: only references inside the schema are allowed" in message
    assert "LOCAL-FILE-SECRET" not in message
    assert requests == []


@pytest.mark.parametrize("case", range(8), ids=[s[0] for s in _schemas("", Path("/x"))])
def test_reference_that_slipped_through_fetches_nothing(
    case: int, counting_server: tuple[str, list[str]], secret_file: Path
) -> None:
    base_url, requests = counting_server
    _, schema, _ = _schemas(base_url, secret_file)[case]
    # Built without validation, as a caller bypassing the rubric loader could.
    spec = ToolArguments.model_construct(
        name="args", type="tool_arguments", tool="t", schema_=schema, gate=True
    )
    result = run_check(spec, transcript("Done.", ToolCall(name="t", arguments='{"amount": 1}')))
    assert result.outcome is Outcome.ERROR
    assert "LOCAL-FILE-SECRET" not in result.detail
    assert "FROM-THE-NETWORK" not in result.detail
    assert requests == []


@pytest.mark.parametrize(
    ("schema", "arguments", "outcome"),
    [
        pytest.param(
            {
                "$defs": {"amount": {"type": "number", "maximum": 500}},
                "type": "object",
                "properties": {"amount": {"$ref": "#/$defs/amount"}},
            },
            '{"amount": 900}',
            Outcome.FAIL,
            id="defs",
        ),
        pytest.param(
            {
                "definitions": {"id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]+$"}},
                "properties": {"order": {"$ref": "#/definitions/id"}},
            },
            '{"order": "AB123"}',
            Outcome.PASS,
            id="definitions",
        ),
        pytest.param(
            {
                "$defs": {"n": {"$anchor": "positive", "type": "number", "exclusiveMinimum": 0}},
                "properties": {"amount": {"$ref": "#positive"}},
            },
            '{"amount": -1}',
            Outcome.FAIL,
            id="anchor",
        ),
        pytest.param(
            {
                "$id": "https://schemas.example/refund.json",
                "$defs": {"amount": {"type": "number"}},
                "properties": {"amount": {"$ref": "#/$defs/amount"}},
            },
            '{"amount": "x"}',
            Outcome.FAIL,
            id="root-id",
        ),
    ],
)
def test_references_inside_the_schema_work(
    schema: dict[str, Any], arguments: str, outcome: Outcome
) -> None:
    rubric = loaded({"name": "args", "type": "tool_arguments", "tool": "t", "schema": schema})
    call = ToolCall(name="t", arguments=arguments, result="ok")
    assert run_check(rubric.checks[0], transcript("Done.", call)).outcome is outcome


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            {"properties": {"a": {"$ref": "#/$defs/missing"}}},
            "$ref '#/$defs/missing' at #/properties/a: does not resolve inside the schema",
            id="missing-pointer",
        ),
        pytest.param(
            {"properties": {"a": {"$ref": "#nowhere"}}},
            "$ref '#nowhere' at #/properties/a: does not resolve inside the schema",
            id="missing-anchor",
        ),
        pytest.param(
            {"$defs": {"a": {"$id": "https://evil.example/a.json"}}},
            "$id at #/$defs/a: allowed only at the top of the schema",
            id="nested-id",
        ),
        pytest.param(
            {"properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
            "$schema at #/properties/a: allowed only at the top of the schema",
            id="nested-schema",
        ),
    ],
)
def test_schema_shapes_that_could_escape_are_refused(schema: dict[str, Any], expected: str) -> None:
    message = refused(
        rubric_text({"name": "args", "type": "tool_arguments", "tool": "t", "schema": schema})
    )
    assert f"{FILE}: checks.0.tool_arguments.schema: Value error" in message
    assert expected in message


# --- YAML: alias expansion and nesting are bounded -----------------------------------


def billion_laughs() -> str:
    lines = ['  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return 'id: bomb\nversion: "1"\ncalibration:\n' + "\n".join(lines) + "\n"


@pytest.mark.timeout(30)
def test_billion_laughs_fails_fast_naming_the_file() -> None:
    text = billion_laughs()
    assert len(text.encode()) < 1024
    started = time.perf_counter()
    message = refused(text)
    assert time.perf_counter() - started < 1.0
    assert message.startswith(f"{FILE}: (top level): refused: aliases expand to more than")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            'id: x\nversion: "1"\ncalibration: ' + "[" * 50_000 + "]" * 50_000,
            "refused: nested deeper than 64 levels",
            id="deep-flow",
        ),
        pytest.param(
            'id: x\nversion: "1"\ncalibration:\n'
            + "".join(f"{'  ' * (i + 1)}k:\n" for i in range(200)),
            "refused: nested deeper than 64 levels",
            id="deep-block",
        ),
        pytest.param(
            'id: x\nversion: "1"\ncalibration: &a {self: *a}\n',
            "refused: an alias refers to a node that contains it",
            id="cycle",
        ),
    ],
)
def test_deep_or_recursive_yaml_is_refused(text: str, expected: str) -> None:
    message = refused(text)
    assert message.startswith(f"{FILE}: (top level): ")
    assert expected in message


def test_a_few_anchors_still_load() -> None:
    text = """
id: anchors
version: "1"
checks:
  - name: refund_args
    type: tool_arguments
    tool: issue_refund
    schema: &refund {type: object, required: [order_id], properties: {amount: {type: number}}}
  - name: partial_args
    type: tool_arguments
    tool: partial_refund
    schema: *refund
  - &quiet {name: fast, type: max_latency_ms, limit: 30000, gate: false}
  - {<<: *quiet, name: slow, limit: 60000}
"""
    rubric = parse_rubric(text, FILE)
    assert [c.name for c in rubric.checks] == ["refund_args", "partial_args", "fast", "slow"]
    assert rubric.checks[3].gate is False


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        pytest.param(
            "{name: a, type: max_latency_ms, limit: .inf}",
            "checks.0.max_latency_ms.limit: Input should be a finite number",
            id="infinite-latency",
        ),
        pytest.param(
            "{name: a, type: max_latency_ms, limit: .nan}",
            "checks.0.max_latency_ms.limit: Input should be a finite number",
            id="nan-latency",
        ),
        pytest.param(
            "{name: a, type: max_latency_ms, limit: 1.0e+300}",
            "checks.0.max_latency_ms.limit: Input should be less than or equal to 604800000",
            id="latency-past-a-week",
        ),
        pytest.param(
            "{name: a, type: max_tool_calls, limit: true}",
            "checks.0.max_tool_calls.limit: Value error, expected a number, got true",
            id="true-as-count",
        ),
        pytest.param(
            "{name: a, type: max_latency_ms, limit: false}",
            "checks.0.max_latency_ms.limit: Value error, expected a number, got false",
            id="false-as-latency",
        ),
    ],
)
def test_limits_are_finite_numbers(check: str, expected: str) -> None:
    # pydantic would read true as 1 and .inf as a limit no latency reaches (then fail on it).
    message = refused(f'id: x\nversion: "1"\nchecks:\n  - {check}\n')
    assert message == f"{FILE}: {expected}"


def test_numbers_written_as_yaml_reads_them_still_load() -> None:
    # PyYAML reads 5e3 as text; pydantic's number reading takes it, as before.
    text = 'id: x\nversion: "1"\nchecks:\n  - {name: a, type: max_latency_ms, limit: 5e3}\n'
    assert parse_rubric(text, FILE).checks[0].limit == 5000.0  # type: ignore[union-attr]


def test_a_key_given_twice_is_refused_naming_both_lines() -> None:
    message = refused('id: x\nid: y\nversion: "1"\n')
    assert message == (
        f"{FILE}: not valid YAML: line 2, column 1: key 'id' given twice (first on line 1); "
        "keep one"
    )


def test_a_rubric_file_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes('id: caf\xe9\nversion: "1"\n'.encode("latin-1"))
    with pytest.raises(RubricError) as caught:
        load_rubric(path)
    assert str(caught.value) == f"{path}: not UTF-8 text (byte 7); save it as UTF-8"
