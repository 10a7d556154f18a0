"""Provenance on verdicts: the served model version and the rubric fingerprint.

The model version comes from the real google-genai client (Gemini's
``modelVersion``) and the OpenAI-compatible client (the answer's ``model``),
both against the local judge server; a run in which the server's version
changes halfway shows the change on the verdict records, the spans, the
verdict counter and the info gauge, and the dashboards' annotation query
marks it (promtool evaluates the committed query over that history).
The rubric hash is checked on a table of edits that must and must not change
it, and its fingerprint on ``rubrics check``, ``rubrics fingerprint`` and
start-up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.adapters.judge_backends import GeminiBackend, OpenAICompatBackend
from sidecar.adapters.otel import EVENT_NAME, VerdictSpans, tracer_provider
from sidecar.adapters.prometheus import Metrics, record_rubrics, record_verdict
from sidecar.cli import main
from sidecar.drift.fingerprint import FingerprintStatus, check_fingerprint, with_fingerprint
from sidecar.engine.offline import ReplaySummary, evaluate_traces
from sidecar.evaluate.rubric import Rubric, parse_rubric
from sidecar.evaluate.rubric_hash import rubric_hash
from sidecar.evaluate.sample import Sampler, trace_fraction
from sidecar.judge import screen_case
from sidecar.judge.config import JudgeSettings
from sidecar.judge.service import Backend, JudgeService
from sidecar.wire import read_records
from sidecar.wire.verdicts import VerdictRecord, verdict_json
from tests import realparts
from tests.builders import JUDGE_MODEL, genai_trace, refund_rubric, refund_transcript
from tests.dashboard_queries import ANNOTATION_EXPRS, expand
from tests.gemini_server import (
    JudgeServer,
    Reply,
    gemini_json,
    gemini_text,
    openai_json,
    status,
)
from tests.judge_fixtures import GOOD_VERDICTS

# -- the rubric hash ------------------------------------------------------------------------

BASE = """\
# Refund rubric
id: refunds
version: "3"
sampling: {judge_ratio: 0.5}
checks:
  - {name: allowed, type: tool_allowlist, tools: [lookup_order]}
judge:
  model: gemini-2.5-flash
  instructions: Grade the refund answer.
  criteria:
    - name: grounded
      definition: The amount equals the tool result.
      pass_example: '"40 EUR" (tool says 40)'
      fail_example: '"45 EUR" (tool says 40)'
"""

SAME_CONTENT = {
    "comments-and-blank-lines": BASE.replace("# Refund rubric\n", "\n# another comment\n\n")
    + "# trailing\n",
    "key-order": BASE.replace('id: refunds\nversion: "3"\n', 'version: "3"\nid: refunds\n'),
    "quoting": BASE.replace('version: "3"', "version: '3'").replace(
        "model: gemini-2.5-flash", 'model: "gemini-2.5-flash"'
    ),
    "flow-vs-block": BASE.replace(
        "sampling: {judge_ratio: 0.5}", "sampling:\n  judge_ratio: 0.5"
    ).replace(
        "  - {name: allowed, type: tool_allowlist, tools: [lookup_order]}",
        "  - name: allowed\n    type: tool_allowlist\n    tools:\n      - lookup_order",
    ),
    "calibration-block": BASE
    + "calibration: {judge_model: gemini-2.5-flash, rubric_version: '3', kappa_threshold: 0.4}\n",
    "fingerprint-line": BASE + 'fingerprint: {version: "3", hash: "0123456789ab"}\n',
}

SEMANTIC_EDITS = {
    "definition-text": ("The amount equals the tool result.", "The amount matches the tool."),
    "version-bump": ('version: "3"', 'version: "4"'),
    "judge-model": ("model: gemini-2.5-flash", "model: gemini-2.5-pro"),
    "sampling-ratio": ("judge_ratio: 0.5", "judge_ratio: 0.25"),
    "check-tools": ("tools: [lookup_order]", "tools: [lookup_order, issue_refund]"),
    "criterion-gated-off": (
        "      fail_example: '\"45 EUR\" (tool says 40)'\n",
        "      fail_example: '\"45 EUR\" (tool says 40)'\n      gate: false\n",
    ),
    "whitespace-inside-a-value": ("Grade the refund answer.", "Grade the refund  answer."),
}


def hash_of(text: str) -> str:
    return parse_rubric(text, Path("r.yaml")).content_hash


def test_hash_is_12_hex_of_sha256_over_canonical_json() -> None:
    document = {"version": "1", "id": "r", "judge": {"model": "m", "criteria": []}}
    canonical = '{"id":"r","judge":{"criteria":[],"model":"m"},"version":"1"}'
    assert rubric_hash(document) == hashlib.sha256(canonical.encode()).hexdigest()[:12]
    assert len(hash_of(BASE)) == 12
    int(hash_of(BASE), 16)


@pytest.mark.parametrize("text", SAME_CONTENT.values(), ids=SAME_CONTENT.keys())
def test_layout_comments_order_and_bookkeeping_do_not_change_the_hash(text: str) -> None:
    assert hash_of(text) == hash_of(BASE)


@pytest.mark.parametrize(("old", "new"), SEMANTIC_EDITS.values(), ids=SEMANTIC_EDITS.keys())
def test_every_semantic_edit_changes_the_hash(old: str, new: str) -> None:
    assert old in BASE
    assert hash_of(BASE.replace(old, new)) != hash_of(BASE)


def test_the_hash_of_a_file_and_of_its_document_agree() -> None:
    # Rubrics built in code (tests, the demo) hash the same as the file they came from.
    document = yaml.safe_load(BASE)
    assert Rubric.model_validate(document).content_hash == hash_of(BASE) == rubric_hash(document)


# -- the fingerprint ------------------------------------------------------------------------


def fingerprinted(text: str) -> str:
    rubric = parse_rubric(text, Path("r.yaml"))
    return with_fingerprint(text, rubric.version, rubric.content_hash)


@pytest.mark.parametrize(
    ("edit", "status"),
    [
        pytest.param(lambda t: t, FingerprintStatus.MATCHES, id="unchanged"),
        pytest.param(
            lambda t: t.replace("Grade the refund answer.", "Grade it."),
            FingerprintStatus.CHANGED,
            id="edited-without-bump",
        ),
        pytest.param(
            lambda t: t.replace("Grade the refund answer.", "Grade it.").replace(
                'version: "3"', 'version: "4"', 1
            ),
            FingerprintStatus.STALE,
            id="edited-and-bumped",
        ),
        pytest.param(
            lambda t: t.replace("# Refund rubric", "# Refund rubric, reworded comment"),
            FingerprintStatus.MATCHES,
            id="comment-only",
        ),
    ],
)
def test_fingerprint_status(edit: Callable[[str], str], status: FingerprintStatus) -> None:
    check = check_fingerprint(parse_rubric(edit(fingerprinted(BASE)), Path("r.yaml")))
    assert check.status is status
    assert check.warning is (status is FingerprintStatus.CHANGED)


def test_without_a_fingerprint_nothing_is_compared() -> None:
    assert check_fingerprint(parse_rubric(BASE, Path("r.yaml"))).status is (
        FingerprintStatus.UNRECORDED
    )


@pytest.mark.parametrize(
    "existing",
    [
        pytest.param('fingerprint: {version: "2", hash: "aaaaaaaaaaaa"}\n', id="flow"),
        pytest.param(
            "fingerprint:\n  version: '2'\n  hash: aaaaaaaaaaaa\n\n# end\n", id="block-and-comment"
        ),
    ],
)
def test_writing_the_fingerprint_replaces_it_and_keeps_the_rest(existing: str) -> None:
    text = BASE + existing
    written = fingerprinted(text)
    assert written.startswith(BASE)  # comments and layout above it untouched
    assert written.count("fingerprint:") == 1
    rubric = parse_rubric(written, Path("r.yaml"))
    assert rubric.fingerprint is not None
    assert (rubric.fingerprint.version, rubric.fingerprint.hash) == ("3", hash_of(BASE))
    assert fingerprinted(written) == written


def test_rubrics_check_warns_on_an_edit_without_a_version_bump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "r.yaml").write_text(BASE)
    assert main(["rubrics", "fingerprint", str(tmp_path)]) == 0
    assert f"refunds v3 hash {hash_of(BASE)}" in capsys.readouterr().out
    assert main(["rubrics", "check", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"ok  refunds v3: 1 checks, 1 criteria, judge {JUDGE_MODEL}, hash ")
    assert ("warning" in out, "fingerprint" in out, err) == (False, False, "")

    (tmp_path / "r.yaml").write_text(
        (tmp_path / "r.yaml").read_text().replace("Grade the refund answer.", "Grade it.")
    )
    assert main(["rubrics", "check", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "warning: rubric refunds v3: content changed without a version bump" in out
    assert "content changed without a version bump" in err
    assert main(["rubrics", "check", "--strict", str(tmp_path)]) == 1
    capsys.readouterr()

    (tmp_path / "r.yaml").write_text(
        (tmp_path / "r.yaml").read_text().replace('version: "3"', 'version: "4"', 1)
    )
    assert main(["rubrics", "check", "--strict", str(tmp_path)]) == 0
    assert "note: rubric refunds v4: fingerprint is of version 3" in capsys.readouterr().out


def test_fingerprint_writes_nothing_when_one_rubric_of_the_folder_is_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(BASE)
    (tmp_path / "b.yaml").write_text("id: [not a rubric\n")
    assert main(["rubrics", "fingerprint", str(tmp_path)]) == 2
    assert (tmp_path / "a.yaml").read_text() == BASE
    assert "b.yaml" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["rubrics", "fingerprint", str(empty)]) == 2
    assert "no rubric files (*.yaml) found" in capsys.readouterr().err


def test_start_up_counts_and_logs_a_rubric_changed_without_a_bump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "r.yaml").write_text(fingerprinted(BASE).replace("Grade the refund", "Grade a"))
    (rubrics / "s.yaml").write_text(fingerprinted(BASE.replace("id: refunds", "id: steady")))
    metrics = Metrics()
    loaded = [parse_rubric(p.read_text(), p) for p in sorted(rubrics.iterdir())]
    record_rubrics(metrics, loaded)

    def counted(rubric: str) -> float | None:
        return metrics.registry.get_sample_value(
            "sidecar_rubric_unversioned_changes_total", {"rubric": rubric, "rubric_version": "3"}
        )

    assert (counted("refunds"), counted("steady")) == (1.0, None)

    # `sidecar run` says so in its log before it tries Kafka (closed here: exit 1).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "rubrics_dir": str(rubrics),
                "kafka": {"bootstrap_servers": f"127.0.0.1:{port}"},
                "metrics": {"host": "127.0.0.1", "port": 0},
                "otel": {"enabled": False},
            }
        )
    )
    caplog.set_level(logging.WARNING, logger="sidecar")
    assert main(["run", "--config", str(config)]) == 1
    capsys.readouterr()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    changed = [w for w in warnings if "content changed without a version bump" in w]
    assert any("rubric refunds v3: content changed without a version bump" in w for w in changed)
    assert not any("steady" in w for w in changed)


# -- the served model version ---------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    judge = JudgeServer().start()
    try:
        yield judge
    finally:
        judge.stop()


@asynccontextmanager
async def judge_service(
    server: JudgeServer, backend: str = "gemini", cache: int = 100
) -> AsyncIterator[tuple[JudgeService, Metrics]]:
    settings = JudgeSettings(max_attempts=1, cache_max_entries=cache)
    chosen: Backend = (
        GeminiBackend(base_url=server.base_url, api_key="test-key")
        if backend == "gemini"
        else OpenAICompatBackend(base_url=server.openai_base_url)
    )
    metrics = Metrics()
    async with JudgeService(chosen, settings, metrics) as service:
        yield service, metrics


def info(metrics: Metrics) -> dict[tuple[str, str], float]:
    """The series of sidecar_judge_model_version_info: (judge_model, version) -> value."""
    return {
        (s.labels["judge_model"], s.labels["judge_model_version"]): s.value
        for family in metrics.registry.collect()
        if family.name == "sidecar_judge_model_version_info"
        for s in family.samples
    }


@pytest.mark.parametrize(
    ("reply", "version"),
    [
        pytest.param(
            gemini_json(GOOD_VERDICTS, model_version="gemini-2.5-flash-preview-09-2025"),
            "gemini-2.5-flash-preview-09-2025",
            id="model-version",
        ),
        pytest.param(gemini_json(GOOD_VERDICTS, model_version=None), "unknown", id="not-said"),
        pytest.param(
            gemini_text("not json", model_version="gemini-2.5-flash-002"),
            "gemini-2.5-flash-002",
            id="unreadable-answer-still-says-who-served-it",
        ),
    ],
)
async def test_gemini_model_version_is_what_served_the_answer(
    server: JudgeServer, reply: Reply, version: str
) -> None:
    async with judge_service(server) as (service, metrics):
        server.script(reply)
        rubric, transcript = refund_rubric(), refund_transcript()
        result = await service.judge(rubric, transcript, screen_case(rubric, transcript))
    assert result.model_version == version
    assert info(metrics) == {(JUDGE_MODEL, version): 1.0}


async def test_openai_model_is_what_served_the_answer(server: JudgeServer) -> None:
    rubric, transcript = refund_rubric(model="llama3.1"), refund_transcript()
    async with judge_service(server, "openai") as (service, metrics):
        server.script(openai_json(GOOD_VERDICTS, model="llama3.1:8b-instruct-q4_K_M"))
        result = await service.judge(rubric, transcript, screen_case(rubric, transcript))
        server.script(openai_json(GOOD_VERDICTS, model=None))
        other = refund_transcript(answer="Refund of 42.50 EUR for order A-1001 approved.")
        unsaid = await service.judge(rubric, other, screen_case(rubric, other))
    assert (result.model_version, unsaid.model_version) == (
        "llama3.1:8b-instruct-q4_K_M",
        "unknown",
    )
    assert info(metrics) == {("llama3.1", "unknown"): 1.0}


async def test_no_answer_has_no_model_version(server: JudgeServer) -> None:
    async with judge_service(server) as (service, metrics):
        server.script(status(500))
        rubric, transcript = refund_rubric(), refund_transcript()
        result = await service.judge(rubric, transcript, screen_case(rubric, transcript))
    assert (result.judged, result.error_reason, result.model_version) == (
        False,
        "judge_unavailable",
        None,
    )
    assert info(metrics) == {}


async def test_a_cached_verdict_keeps_the_version_that_made_it(server: JudgeServer) -> None:
    rubric, transcript = refund_rubric(), refund_transcript()
    screening = screen_case(rubric, transcript)
    async with judge_service(server) as (service, _):
        server.script(
            gemini_json(GOOD_VERDICTS, model_version="v1"),
            gemini_json(GOOD_VERDICTS, model_version="v2"),
        )
        first = await service.judge(rubric, transcript, screening)
        again = await service.judge(rubric, transcript, screening)
        assert (again.cached, again.model_version) == (True, "v1")
        # The canary asks afresh and sees the version serving now.
        fresh = await service.judge(rubric, transcript, screening, use_cache=False)
    assert (first.model_version, fresh.cached, fresh.model_version) == ("v1", False, "v2")
    assert len(server.requests) == 2


# -- a version change halfway through a run ------------------------------------------------


def all_pass_from(versions: list[str]) -> Callable[[str, Any], Reply]:
    """Answer every criterion PASS, saying the next version of ``versions`` served it."""
    served = iter(versions)

    def respond(path: str, body: Any) -> Reply:
        schema = body["generationConfig"]["responseSchema"]
        names = schema["properties"]["criteria"]["items"]["properties"]["criterion"]["enum"]
        criteria = [{"criterion": n, "evidence": "NONE", "verdict": "PASS"} for n in names]
        return gemini_json({"criteria": criteria}, model_version=next(served))

    return respond


def sampled_rubric() -> Rubric:
    # Half the traces are judged (by trace-id hash); the rest are unjudged verdicts.
    return refund_rubric(sampling={"judge_ratio": 0.5})


TRACE_IDS = [f"{n:032x}" for n in range(1, 41)]


async def test_a_version_change_mid_run_shows_on_records_spans_and_metrics() -> None:
    rubric = sampled_rubric()
    traces = [
        # Each answer differs, so no verdict comes from the cache.
        genai_trace(f"Refund order A-{n}?", answer=f"Refunded A-{n}.", trace_id=t)
        for n, t in enumerate(TRACE_IDS)
    ]
    judged_ids = [t.trace_id for t in traces if trace_fraction(t.trace_id) < 0.5]
    assert 6 <= len(judged_ids) <= 34  # both kinds are present
    half = len(judged_ids) // 2
    versions = ["gemini-2.5-flash-001"] * half + ["gemini-2.5-flash-002"] * (len(judged_ids) - half)
    server = JudgeServer(responder=all_pass_from(versions)).start()
    exporter = InMemorySpanExporter()
    spans = VerdictSpans(tracer_provider(exporter, batch=False))
    try:
        async with JudgeService(
            GeminiBackend(base_url=server.base_url, api_key="test-key"),
            JudgeSettings(max_attempts=1),
            metrics := Metrics(),
        ) as service:
            verdicts = await evaluate_traces(
                traces,
                [rubric],
                Sampler(judge_enabled=True),
                judge=service,
                summary=ReplaySummary(),
            )
    finally:
        server.stop()
    for verdict in verdicts:
        record_verdict(metrics, verdict)
        spans.emit(verdict)

    # Records: the hash on every one, the serving version on the judged ones only.
    records = [r for _, r in read_records([verdict_json(v) for v in verdicts], "v", VerdictRecord)]
    assert {r.rubric_hash for r in records} == {rubric.content_hash}
    served = [r.judge_model_version for r in records if r.judged]
    assert served == versions
    assert all(r.judge_model_version is None for r in records if not r.judged)
    assert all(
        "judge_model_version" not in json.loads(verdict_json(v)) for v in verdicts if not v.judged
    )

    # Spans: the version on the span and on each criterion event, the hash on every event.
    by_trace = {f"{s.context.trace_id:032x}": s for s in exporter.get_finished_spans() if s.context}
    for verdict in verdicts:
        span = by_trace[verdict.trace_id]
        assert span.attributes is not None
        assert span.attributes["eval.rubric.hash"] == rubric.content_hash
        events = [e for e in span.events if e.name == EVENT_NAME]
        if verdict.judged:
            assert span.attributes["eval.judge.model_version"] == verdict.judge_model_version
            assert [e.attributes["eval.judge.model_version"] for e in events if e.attributes] == [
                verdict.judge_model_version
            ] * 2
        else:
            assert "eval.judge.model_version" not in span.attributes
            assert events == []  # SKIPPED criteria have no events
    spans.shutdown()

    # Metrics: the verdict counter splits by serving version; the gauge shows the current one.
    def criteria(version: str) -> float:
        return sum(
            metrics.registry.get_sample_value(
                "sidecar_criterion_verdicts_total",
                {
                    "rubric": "refunds",
                    "rubric_version": "3",
                    "judge_model": JUDGE_MODEL,
                    "judge_model_version": version,
                    "criterion": name,
                    "gate": "true",
                    "outcome": outcome,
                    "scope": "trace",
                },
            )
            or 0.0
            for name in ("grounded", "polite")
            for outcome in ("PASS", "SKIPPED")
        )

    skipped = len(TRACE_IDS) - len(judged_ids)
    assert criteria("gemini-2.5-flash-001") == 2 * half
    assert criteria("gemini-2.5-flash-002") == 2 * (len(judged_ids) - half)
    assert criteria("none") == 2 * skipped
    assert info(metrics) == {(JUDGE_MODEL, "gemini-2.5-flash-002"): 1.0}
    # Trace-level counters do not carry it.
    families = {f.name: f for f in metrics.registry.collect()}
    for name in ("sidecar_cases", "sidecar_check_results"):
        assert all("judge_model_version" not in s.labels for s in families[name].samples)


# -- the annotations ------------------------------------------------------------------------

VERSION_ANNOTATIONS = [
    (name, expr) for name, expr in ANNOTATION_EXPRS if "sidecar_judge_model_version_info" in expr
]


def test_every_dashboard_with_judge_panels_annotates_model_version_changes() -> None:
    boards = {name.split(":")[0] for name, _ in VERSION_ANNOTATIONS}
    assert boards == {"quality", "judge-health"}


@pytest.mark.parametrize(
    ("name", "expr"), VERSION_ANNOTATIONS, ids=[n for n, _ in VERSION_ANNOTATIONS]
)
def test_version_annotation_marks_the_change_and_only_it(
    tmp_path: Path, name: str, expr: str
) -> None:
    # The gauge as the service exports it: flash moves from -001 to -002 at minute 30 (the
    # -001 series ends there); pro stays on one version all along.
    series = [
        ('sidecar_judge_model_version_info{judge_model="flash",judge_model_version="001"}', "1x30"),
        (
            'sidecar_judge_model_version_info{judge_model="flash",judge_model_version="002"}',
            "_x30 1x30",
        ),
        ('sidecar_judge_model_version_info{judge_model="pro",judge_model_version="7"}', "1x60"),
    ]
    query = expand(expr, {"judge_model": ".*"})
    at = {"flash": "002"}
    document = {
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "promql_expr_test": [
                    # Before the change only the first samples (young series) are "new"...
                    {"expr": query, "eval_time": "20m", "exp_samples": []},
                    # ...at the change the new version is marked...
                    {
                        "expr": query,
                        "eval_time": "35m",
                        "exp_samples": [
                            {
                                "labels": "{"
                                + f'judge_model="flash",judge_model_version="{at["flash"]}"'
                                + "}",
                                "value": 1,
                            }
                        ],
                    },
                    # ...and ten minutes later it is old news.
                    {"expr": query, "eval_time": "50m", "exp_samples": []},
                ],
            }
        ],
    }
    path = tmp_path / "annotation_test.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    result = subprocess.run(
        [realparts.tool("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"
