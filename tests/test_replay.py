"""``sidecar replay``: every input format, the records on stdout, the summary and exit codes.

The same traces are written as OTLP/JSON lines, one pretty-printed OTLP/JSON
document, a single binary ``ExportTraceServiceRequest`` and the Collector file
exporter's proto format (each message after its length as a 4-byte big-endian
unsigned integer, as ``exportMessageAsBuffer`` in the exporter writes it), and
must give identical verdict records. Binary requests come from the OTel SDK's
own OTLP encoder; the JSON forms are converted from them here, independently
of sidecar's code.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.commands.demo import demo_data
from tests.agents.adk_traces import adk2_lines
from tests.agents.genai_spans import GenAICase, make_cases
from tests.agents.otlp import encode_request, split_requests
from tests.agents.refund_shop import BY_NAME
from tests.otlp_files import (
    DEMO_RUBRICS,
    length_prefixed,
    line_trace_id,
    proto_to_otlp_json,
    records,
    replay,
    traces_proto,
)

DEMO_TRACES = demo_data()[0]
EXPECTED = json.loads((DEMO_TRACES.parent / "expected.json").read_text(encoding="utf-8"))

# The keys of a verdict record.
RECORD_KEYS = {
    "id",
    "trace_id",
    "root_span_id",
    "rubric_id",
    "rubric_version",
    "judge_model",
    "agent",
    "agent_version",
    "outcome",
    "judged",
    "sample_reason",
    "injection_suspected",
    "review",
    "checks",
    "criteria",
}


pytestmark = pytest.mark.usefixtures("no_judge_credentials")


# --- format conversions (test side, not sidecar's; the rest are in tests/otlp_files.py) ---


def json_lines(documents: Sequence[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(d, separators=(",", ":")).encode() + b"\n" for d in documents)


def demo_lines() -> list[str]:
    return [line for line in DEMO_TRACES.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cases() -> list[GenAICase]:
    # Seed 2 mixes passing traces with every kind of violation the generator makes.
    return make_cases(16, seed=2)


# --- the same traces in every format ----------------------------------------------------


def write_generated(cases: Sequence[GenAICase], fmt: str, path: Path) -> Path:
    # Each trace over two requests, as a batching exporter sends them.
    messages = [m for case in cases for m in split_requests(case.spans, 2)]
    everything = encode_request([s for case in cases for s in case.spans])
    match fmt:
        case "json_lines":
            path.write_bytes(json_lines([proto_to_otlp_json(m) for m in messages]))
        case "json_document":
            path.write_text(json.dumps(proto_to_otlp_json(everything), indent=2), encoding="utf-8")
        case "proto_request":
            path.write_bytes(everything)
        case "proto_file_exporter":
            path.write_bytes(length_prefixed(messages))
    return path


FORMATS = ["json_lines", "json_document", "proto_request", "proto_file_exporter"]


def test_generated_traces_give_identical_records_in_every_format(
    cases: list[GenAICase], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = {}
    for fmt in FORMATS:
        path = write_generated(cases, fmt, tmp_path / f"traces.{fmt}")
        code, lines, err = replay(capsys, path, "--rubrics", DEMO_RUBRICS, "--exit-zero")
        assert code == 0, err
        assert "undecodable" not in err
        results[fmt] = records(lines)
    assert len(results["json_lines"]) == len(cases)
    for fmt in FORMATS[1:]:
        assert results[fmt] == results["json_lines"], fmt


def test_generated_traces_fail_the_checks_they_were_built_to_fail(
    cases: list[GenAICase], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_generated(cases, "proto_file_exporter", tmp_path / "traces.bin")
    _, lines, _ = replay(capsys, path, "--rubrics", DEMO_RUBRICS, "--exit-zero")
    by_trace = {r["trace_id"]: r for r in records(lines)}
    for case in cases:
        failed = {c["name"] for c in by_trace[case.trace_id]["checks"] if c["outcome"] == "FAIL"}
        assert failed == case.expected_failures, case.kind


@pytest.mark.parametrize("fmt", ["json_lines", "proto_file_exporter"])
def test_live_adk2_traces_fail_the_checks_they_were_built_to_fail(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = adk2_lines()
    path = tmp_path / f"adk2.{fmt}"
    if fmt == "json_lines":
        path.write_text("".join(line + "\n" for line in lines.values()), encoding="utf-8")
    else:
        path.write_bytes(length_prefixed([traces_proto(line) for line in lines.values()]))
    code, out, err = replay(capsys, path, "--rubrics", DEMO_RUBRICS)
    assert code == 1, err
    assert f"{len(lines)} traces, {len(lines)} verdicts" in err
    by_trace = {r["trace_id"]: r for r in records(out)}
    for name, line in lines.items():
        record = by_trace[line_trace_id(line)]
        assert (record["rubric_id"], record["agent"], record["agent_version"]) == (
            "refund-support",
            "refund_agent",
            "1.4.2",
        )
        failed = {c["name"] for c in record["checks"] if c["outcome"] == "FAIL"}
        assert failed == BY_NAME[name].expected_failures, name
        assert record["outcome"] == ("unacceptable" if failed else "acceptable"), name


@pytest.mark.parametrize(
    "fmt",
    [
        pytest.param("proto_request", id="one-binary-request-per-line"),
        pytest.param("proto_file_exporter", id="file-exporter-proto"),
    ],
)
def test_demo_traces_converted_to_protobuf_give_the_same_records(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = [traces_proto(line) for line in demo_lines()]
    _, json_records, _ = replay(capsys, DEMO_TRACES, "--rubrics", DEMO_RUBRICS)
    if fmt == "proto_request":
        # One binary request per file, all files in one replay.
        paths = []
        for index, message in enumerate(messages):
            paths.append(tmp_path / f"request-{index}.bin")
            paths[-1].write_bytes(message)
    else:
        paths = [tmp_path / "traces.bin"]
        paths[0].write_bytes(length_prefixed(messages))
    code, lines, err = replay(capsys, *paths, "--rubrics", DEMO_RUBRICS)
    assert code == 1, err
    assert records(lines) == records(json_records)
    assert len(lines) == len(EXPECTED)


def test_pretty_printed_document_and_its_binary_twin(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The opentelemetry-proto example request, in its JSON and binary forms.
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "example.yaml").write_text(
        "id: example\nversion: '1'\napplies_to: {service.name: my.service}\n"
        "checks:\n  - {name: no_errors, type: no_error_spans}\n",
        encoding="utf-8",
    )
    pretty = shared_data / "otlp_proto_examples_trace.json"
    assert pretty.read_text(encoding="utf-8").startswith("{\n")
    results = []
    for name in ("otlp_proto_examples_trace.json", "otlp_proto_examples_trace.protobuf-bin"):
        code, lines, err = replay(capsys, shared_data / name, "--rubrics", rubrics)
        assert code == 0, err
        assert "1 records, 1 spans, 1 traces, 1 verdicts (acceptable 1)" in err
        results.append(records(lines))
    assert results[0] == results[1]
    (record,) = results[0]
    # Upper-case hex ids in the JSON example come out lower-case.
    assert record["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert record["root_span_id"] == "eee19b7ec3c1b174"
    assert record["agent"] == "my.service"


# --- stdout, stderr, exit codes ---------------------------------------------------------


def test_stdout_is_verdict_records_and_summary_is_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, lines, err = replay(capsys, DEMO_TRACES, "--rubrics", DEMO_RUBRICS)
    assert code == 1
    assert len(lines) == len(EXPECTED)
    for record in map(json.loads, lines):
        assert record.keys() >= RECORD_KEYS
        assert record["outcome"] in {"acceptable", "unacceptable", "errored"}
        assert record["judged"] is False
        assert record["sample_reason"] == "judge_disabled"
        assert all(set(c) == {"name", "outcome", "gate", "detail"} for c in record["checks"])
        assert all(c["outcome"] == "SKIPPED" for c in record["criteria"])
        assert len(record["id"]) == 64
    assert err.splitlines()[0] == (
        "replay: 1 files, 14 records, 86 spans, 13 traces, 13 verdicts "
        "(acceptable 6, unacceptable 7); judged 0 (judge off: no credentials); "
        "0 traces matched no rubric"
    )


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("config", "wait"),
    [
        pytest.param(None, timedelta(seconds=5), id="default-decision-wait"),
        pytest.param("assembler: {decision_wait_s: 0.25}\n", timedelta(seconds=0.25), id="config"),
    ],
)
def test_replay_decides_each_verdict_the_decision_wait_after_its_trace_ended(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, config: str | None, wait: timedelta
) -> None:
    settings: list[str | Path] = []
    if config is not None:
        (tmp_path / "sidecar.yaml").write_text(config, encoding="utf-8")
        settings = ["--config", tmp_path / "sidecar.yaml"]
    _, lines, _ = replay(capsys, DEMO_TRACES, "--rubrics", DEMO_RUBRICS, *settings)
    assert lines
    for record in map(json.loads, lines):
        start, end = _utc(record["trace_start"]), _utc(record["trace_end"])
        assert start <= end
        assert _utc(record["decided_at"]) - end == wait
    again = replay(capsys, DEMO_TRACES, "--rubrics", DEMO_RUBRICS, *settings)[1]
    assert again == lines


def _acceptable_only(tmp_path: Path) -> Path:
    keep = [line for line in demo_lines() if not EXPECTED[line_trace_id(line)]["failing_checks"]]
    path = tmp_path / "acceptable.jsonl"
    path.write_text("\n".join(keep) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("acceptable_only", "flags", "expected_code"),
    [
        pytest.param(False, [], 1, id="unacceptable-case-exits-1"),
        pytest.param(False, ["--exit-zero"], 0, id="exit-zero"),
        pytest.param(True, [], 0, id="all-acceptable-exits-0"),
    ],
)
def test_exit_code(
    acceptable_only: bool,
    flags: list[str],
    expected_code: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _acceptable_only(tmp_path) if acceptable_only else DEMO_TRACES
    code, lines, _ = replay(capsys, path, "--rubrics", DEMO_RUBRICS, *flags)
    assert code == expected_code
    assert lines


def _corrupt(lines: list[str], position: int, bad: str) -> Iterator[str]:
    yield from lines[:position]
    yield bad
    yield from lines[position:]


@pytest.mark.parametrize(
    ("position", "bad", "reason"),
    [
        pytest.param(0, "not json at all", "bad_json", id="garbage-first-line"),
        pytest.param(5, '{"resourceSpans": [{"scopeSpans": [{"sp', "bad_json", id="truncated-line"),
        pytest.param(
            14, '{"resourceSpans": "nope"}', "bad_json: malformed", id="json-but-not-otlp-last"
        ),
        pytest.param(3, "[1, 2, 3]", "bad_json", id="json-array"),
    ],
)
def test_undecodable_line_is_reported_and_skipped(
    position: int, bad: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(_corrupt(demo_lines(), position, bad)) + "\n", encoding="utf-8")
    code, lines, err = replay(capsys, path, "--rubrics", DEMO_RUBRICS)
    assert code == 1
    assert len(lines) == len(EXPECTED)
    (problem,) = [line for line in err.splitlines() if "undecodable" in line]
    assert problem.startswith(f"replay: skipped undecodable record {path}:{position + 1}: {reason}")
    assert "15 records, 86 spans, 13 traces" in err


def test_corrupt_message_in_file_exporter_proto_is_one_bad_record(
    cases: list[GenAICase], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = [encode_request(case.spans) for case in cases]
    # A length-delimited field claiming more bytes than the message holds.
    broken = b"\x0a\xff\xff\xff\x0f" + b"\x00" * 8
    path = tmp_path / "traces.bin"
    path.write_bytes(length_prefixed([*messages[:3], broken, *messages[3:]]))
    code, lines, err = replay(capsys, path, "--rubrics", DEMO_RUBRICS, "--exit-zero")
    assert code == 0
    assert len(lines) == len(cases)
    assert f"skipped undecodable record {path}#4: bad_protobuf" in err


@pytest.mark.parametrize("kept", [1, 3, 4, 9, 44], ids=lambda n: f"{n}-bytes-of-the-last")
def test_file_exporter_proto_cut_short_keeps_its_whole_messages(
    kept: int, cases: list[GenAICase], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Collector stopped while writing leaves its last message cut short (in its 4-byte
    # length or in the message): the messages before it are evaluated, the cut one is one
    # bad record that says so.
    messages = [encode_request(case.spans) for case in cases]
    whole = length_prefixed(messages)
    before = len(whole) - (4 + len(messages[-1]))
    path = tmp_path / "traces.bin"
    path.write_bytes(whole[: before + kept])
    code, lines, err = replay(capsys, path, "--rubrics", DEMO_RUBRICS, "--exit-zero")
    assert code == 0
    assert len(lines) == len(cases) - 1
    assert {json.loads(line)["trace_id"] for line in lines} == {
        case.trace_id for case in cases[:-1]
    }
    (problem,) = [line for line in err.splitlines() if "undecodable" in line]
    assert problem.startswith(
        f"replay: skipped undecodable record {path}#{len(cases)} (the file ends"
    )
    assert "truncated: the message is cut short" in problem


def test_empty_message_in_file_exporter_proto_is_one_bad_record(
    cases: list[GenAICase], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = [encode_request(case.spans) for case in cases]
    path = tmp_path / "traces.bin"
    path.write_bytes(length_prefixed([*messages[:2], b"", *messages[2:]]))
    code, lines, err = replay(capsys, path, "--rubrics", DEMO_RUBRICS, "--exit-zero")
    assert code == 0
    assert len(lines) == len(cases)
    assert f"skipped undecodable record {path}#3: empty" in err


def test_json_document_with_byte_order_mark(
    cases: list[GenAICase], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = proto_to_otlp_json(encode_request([s for case in cases for s in case.spans]))
    path = tmp_path / "traces.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(document, indent=2).encode())
    code, lines, err = replay(capsys, path, "--rubrics", DEMO_RUBRICS, "--exit-zero")
    assert code == 0, err
    assert len(lines) == len(cases)
    assert "undecodable" not in err


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    code, lines, err = replay(capsys, DEMO_TRACES, missing, "--rubrics", DEMO_RUBRICS)
    assert code == 2
    assert lines == []
    assert err.splitlines() == [
        f"sidecar: {missing}: no such file; give OTLP/JSON lines or OTLP protobuf files, "
        "a directory of them, or - for standard input"
    ]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        pytest.param(None, "not a directory of rubric files", id="missing-directory"),
        pytest.param({}, "no rubric files", id="empty-directory"),
        pytest.param(
            {"bad.yaml": "id: bad\nversion: '1'\nchecks: [{name: x, type: nope}]\n"},
            "bad.yaml: checks.0",
            id="broken-rubric",
        ),
    ],
)
def test_bad_rubric_directory_is_a_usage_error(
    files: dict[str, str] | None,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = tmp_path / "rubrics"
    if files is not None:
        directory.mkdir()
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
    code, lines, err = replay(capsys, DEMO_TRACES, "--rubrics", directory)
    assert code == 2
    assert lines == []
    assert err.startswith("sidecar: ")
    assert message in err


def test_no_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = replay(capsys)
    assert lines == []
    assert code == 2
    assert "PATH" in err


def test_standard_input_and_a_directory_give_the_records_of_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, from_file, _ = replay(capsys, DEMO_TRACES, "--rubrics", DEMO_RUBRICS, "--exit-zero")
    data = Path(DEMO_TRACES).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    _, from_stdin, _ = replay(capsys, "-", "--rubrics", DEMO_RUBRICS, "--exit-zero")
    folder = tmp_path / "traces"
    folder.mkdir()
    lines = data.splitlines(keepends=True)
    (folder / "a.jsonl").write_bytes(b"".join(lines[:5]))
    (folder / "b.jsonl").write_bytes(b"".join(lines[5:]))
    (folder / ".hidden").write_bytes(b"not otlp")
    _, from_folder, err = replay(capsys, folder, "--rubrics", DEMO_RUBRICS, "--exit-zero")
    assert from_stdin == from_file
    assert sorted(from_folder, key=str) == sorted(from_file, key=str)
    assert "2 files" in err


def test_a_missing_rubric_directory_says_how_to_give_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SIDECAR_RUBRICS_DIR", raising=False)
    assert main(["replay", str(DEMO_TRACES)]) == 2
    err = capsys.readouterr().err
    assert "pass --rubrics DIR" in err
    assert err.count("\n") == 1
