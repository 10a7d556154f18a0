"""The service's canary schedule, driven by an injected clock, against the local judge canary_server.

The canary set is the one of tests/test_canary.py (ten refund traces, O7..O10
answered with a wrong amount, O6 labelled FAIL by the person although its
amount is right). ``cases_per_run: 5`` makes a two-run rotation; the canary_server
drifts (passes everything, under a new model version) after the second run,
so the third run re-judges the first five cases with the drifted judge.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sidecar.adapters.judge_backends import GeminiBackend
from sidecar.adapters.otel import VerdictSpans, tracer_provider
from sidecar.adapters.prometheus import Metrics
from sidecar.cli import main
from sidecar.drift.attribute import StreamKey
from sidecar.drift.canary_schedule import CanarySchedule, load_sets
from sidecar.errors import InputFileError
from sidecar.evaluate.rubric import Rubric, load_rubrics
from sidecar.judge import screen_case
from sidecar.judge.config import JudgeSettings
from sidecar.judge.service import JudgeService
from tests.builders import refund_rubric, refund_transcript
from tests.canary_fixtures import RUBRIC, Responder, judging, labels, record_traces
from tests.gemini_server import JudgeServer
from tests.judge_fixtures import FakeClock

MODEL = "gemini-2.5-flash"
WRONG_ORDERS = {"O7", "O8", "O9", "O10"}


@pytest.fixture
def rubrics_dir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A rubric folder with a canary block whose files sit in a subfolder beside it."""
    folder = tmp_path / "rubrics"
    (folder / "canary").mkdir(parents=True)
    line, ids = record_traces()
    (folder / "canary" / "traces.jsonl").write_text(line)
    (folder / "canary" / "labels.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in labels(ids))
    )
    block = (
        "canary: {traces: canary/traces.jsonl, labels: canary/labels.jsonl, "
        "every_s: 3600, cases_per_run: 5}\n"
    )
    (folder / "refund.yaml").write_text(RUBRIC.replace("MODEL", MODEL) + block)
    return folder, ids


class Rig:
    def __init__(
        self, canary_server: JudgeServer, folder: Path, spans: VerdictSpans | None = None
    ) -> None:
        self.clock = FakeClock(start=0.0)
        self.metrics = Metrics()
        self.service = JudgeService(
            GeminiBackend(base_url=canary_server.base_url, api_key="test-key"),
            JudgeSettings(max_attempts=1, breaker_failures=3, concurrency=1),
            self.metrics,
            clock=self.clock,
            sleep=self.clock.sleep,
        )
        self.rubrics = load_rubrics(folder)
        self.schedule = CanarySchedule(
            load_sets(self.rubrics, folder, self.clock()),
            self.service,
            self.metrics,
            spans=spans,
            clock=self.clock,
            sleep=self.clock.sleep,
        )

    def gauges(self, name: str = "sidecar_canary_agreement") -> dict[tuple[str, ...], float]:
        return {
            tuple(s.labels.values()): s.value
            for family in self.metrics.registry.collect()
            if family.name == name
            for s in family.samples
        }

    def value(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def agreement(version: str, criterion: str, statistic: str) -> tuple[str, ...]:
    return ("refund-canary", "2", MODEL, version, criterion, statistic)


async def test_rotation_schedule_gauges_and_drift(
    canary_server: JudgeServer,
    canary_responder: Responder,
    rubrics_dir: tuple[Path, dict[str, str]],
) -> None:
    folder, ids = rubrics_dir
    order_of = {trace: order for order, trace in ids.items()}
    rig = Rig(canary_server, folder)
    (canary,) = rig.schedule.sets
    rotation = [c.transcript.trace_id for c in canary.cases]
    assert rotation == sorted(ids.values())
    first, second = rotation[:5], rotation[5:]

    async with rig.service:
        # Run 1 at start-up: the first five cases by trace id.
        (report,) = await rig.schedule.tick(0.0)
        assert report.cases == 5
        assert len(canary_server.requests) == 5
        sent = " ".join(json.dumps(r.body) for r in canary_server.requests)
        assert all(f"order {order_of[t]}." in sent for t in first)
        assert not any(f"order {order_of[t]}." in sent for t in second)
        # Not due again before every_s.
        assert await rig.schedule.tick(3599.0) == []
        # Run 2: the other five.
        (report2,) = await rig.schedule.tick(3600.0)
        assert len(canary_server.requests) == 10
        assert report2.cases == 5
        # The judge drifts: everything PASS, served by m-002.
        canary_responder.current = judging(drifted=True)
        (report3,) = await rig.schedule.tick(7200.0)
        assert len(canary_server.requests) == 15  # the same cases asked again: no cache

    # Run 3 judged the first five again; the ones with the wrong amount flipped FAIL -> PASS.
    wrong_first = sum(1 for t in first if order_of[t] in WRONG_ORDERS)
    correct3 = report3.criteria[0]
    assert (correct3.flips, correct3.compared) == (wrong_first, 5)
    gauges = rig.gauges()
    assert gauges[agreement("m-002", "correct_amount", "flip_rate")] == wrong_first / 5
    assert gauges[agreement("m-002", "correct_amount", "error_rate")] == 0.0
    assert gauges[agreement("m-002", "polite", "flip_rate")] == 0.0
    # The m-001 series are gone: the alert reads the version serving now.
    assert not [k for k in gauges if k[3] == "m-001"]
    assert rig.gauges("sidecar_canary_kappa_threshold") == {
        ("refund-canary", "correct_amount"): 0.4
    }
    # Production families were not touched; the canary's spend is counted apart.
    for production in (
        "sidecar_judge_tokens_total",
        "sidecar_judge_request_duration_seconds_count",
        "sidecar_verdict_cache_requests_total",
        "sidecar_criterion_verdicts_total",
        "sidecar_cases_total",
    ):
        assert rig.gauges(production) == {}, production
    assert (
        rig.value("sidecar_canary_judge_tokens_total", judge_model=MODEL, kind="input") == 15 * 120
    )
    assert rig.value("sidecar_canary_judge_request_duration_seconds_count", judge_model=MODEL) == 15
    # The served-version gauge is shared state: it shows what answered last.
    assert rig.gauges("sidecar_judge_model_version_info") == {(MODEL, "m-002"): 1.0}
    runs = {
        r: rig.value("sidecar_canary_runs_total", rubric="refund-canary", result=r)
        for r in ("passed", "failed")
    }
    assert sum(v or 0 for v in runs.values()) == 3


async def test_kappa_and_agreement_per_run(
    canary_server: JudgeServer, rubrics_dir: tuple[Path, dict[str, str]]
) -> None:
    folder, ids = rubrics_dir
    order_of = {trace: order for order, trace in ids.items()}
    rig = Rig(canary_server, folder)
    async with rig.service:
        (report,) = await rig.schedule.tick(0.0)
    # Recompute by hand from the slice: humans FAIL O6..O10, the good judge FAILs O7..O10.
    (canary,) = rig.schedule.sets
    tp = fp = fn = tn = 0
    for case in canary.cases[:5]:
        order = order_of[case.transcript.trace_id]
        human_pass = order not in WRONG_ORDERS | {"O6"}
        judge_pass = order not in WRONG_ORDERS
        tp += human_pass and judge_pass
        fp += (not human_pass) and judge_pass
        fn += human_pass and not judge_pass
        tn += (not human_pass) and not judge_pass
    n = tp + fp + fn + tn
    correct = report.criteria[0]
    assert (correct.confusion.tp, correct.confusion.fp, correct.confusion.tn) == (tp, fp, tn)
    gauges = rig.gauges()
    assert gauges[agreement("m-001", "correct_amount", "agreement")] == (tp + tn) / n
    kappa = correct.kappa
    key = agreement("m-001", "correct_amount", "kappa")
    assert (key in gauges) is (kappa is not None)
    if kappa is not None:
        assert gauges[key] == kappa
    # No case has come round again yet: no flip rate.
    assert not [k for k in gauges if k[-1] == "flip_rate"]


async def test_canary_failures_open_the_shared_breaker(
    canary_server: JudgeServer,
    canary_responder: Responder,
    rubrics_dir: tuple[Path, dict[str, str]],
) -> None:
    folder, _ = rubrics_dir
    canary_responder.current = judging(down=frozenset(f"O{n}" for n in range(1, 11)))
    rig = Rig(canary_server, folder)
    async with rig.service:
        (report,) = await rig.schedule.tick(0.0)
        # The breaker opened on the canary's failures; production calls see it too.
        rubric, transcript = refund_rubric(), refund_transcript()
        result = await rig.service.judge(rubric, transcript, screen_case(rubric, transcript))
    assert len(canary_server.requests) == 3
    assert result.error_reason == "judge_unavailable"
    assert not report.passed
    assert rig.gauges()[agreement("none", "correct_amount", "error_rate")] == 1.0
    # The canary's errors are its own; the production call's are production's.
    assert rig.value("sidecar_canary_judge_errors_total", judge_model=MODEL, reason="http_5xx") == 3
    assert rig.value("sidecar_judge_errors_total", judge_model=MODEL, reason="breaker_open") == 1
    assert rig.value("sidecar_canary_runs_total", rubric="refund-canary", result="failed") == 1


async def test_each_canary_case_is_a_span_over_its_judge_calls_without_content(
    canary_server: JudgeServer,
    canary_responder: Responder,
    rubrics_dir: tuple[Path, dict[str, str]],
) -> None:
    folder, ids = rubrics_dir
    order_of = {trace: order for order, trace in ids.items()}
    exporter = InMemorySpanExporter()
    spans = VerdictSpans(tracer_provider(exporter, batch=False))
    rig = Rig(canary_server, folder, spans)
    (canary,) = rig.schedule.sets
    # The first case of the run fails (one 500; three would open the breaker).
    broken = canary.cases[0].transcript.trace_id
    canary_responder.current = judging(down=frozenset({order_of[broken]}))
    async with rig.service:
        await rig.schedule.tick(0.0)
    spans.shutdown()

    finished = list(exporter.get_finished_spans())
    cases = [s for s in finished if s.name == "canary refund-canary"]
    chats = [s for s in finished if s.name == f"chat {MODEL}"]
    assert len(finished) == len(cases) + len(chats)
    first_five = {c.transcript.trace_id for c in canary.cases[:5]}
    by_case = {dict(s.attributes or {})["eval.canary.trace_id"]: s for s in cases}
    assert set(by_case) == first_five
    assert len(chats) == 5  # one attempt per case (max_attempts: 1)
    for case in cases:
        a = dict(case.attributes or {})
        assert case.parent is None  # a trace of its own, not the canary case's
        assert case.context is not None
        assert case.context.trace_id != int(str(a["eval.canary.trace_id"]), 16)
        assert a["eval.rubric.id"] == "refund-canary"
        assert a["eval.rubric.version"] == "2"
        assert a["eval.judge.model"] == MODEL
        assert a["sidecar.judge.purpose"] == "canary"
        assert case.events == ()
        (chat,) = [c for c in chats if c.parent and c.parent.span_id == case.context.span_id]
        c = dict(chat.attributes or {})
        assert chat.kind is SpanKind.CLIENT
        assert chat.context is not None
        assert chat.context.trace_id == case.context.trace_id
        assert c["sidecar.judge.purpose"] == "canary"
        assert c["eval.rubric.id"] == "refund-canary"
        assert c["eval.id"] == a["eval.id"]
        assert c["gen_ai.request.model"] == MODEL
        assert c["sidecar.judge.attempt"] == 1
    # The failed case and its call say why; the others answered, served by m-001.
    down = by_case[broken]
    assert down.status.status_code is StatusCode.ERROR
    assert dict(down.attributes or {})["error.type"] == "judge_unavailable"
    assert [c.status.status_code for c in cases].count(StatusCode.ERROR) == 1
    assert down.context is not None
    (failed,) = [c for c in chats if c.parent and c.parent.span_id == down.context.span_id]
    assert dict(failed.attributes or {})["error.type"] == "http_5xx"
    assert failed.status.status_code is StatusCode.ERROR
    served = [dict(c.attributes or {}).get("gen_ai.response.model") for c in chats]
    assert served.count("m-001") == 4
    # No transcript content and no judge evidence on any span.
    text = json.dumps(
        [[dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]] for s in finished]
    )
    for content in ("refund order", "Sorry about that", "40.25", "999.95", "issue_refund"):
        assert content not in text


async def test_no_spans_without_a_span_recorder(
    canary_server: JudgeServer, rubrics_dir: tuple[Path, dict[str, str]]
) -> None:
    folder, _ = rubrics_dir
    exporter = InMemorySpanExporter()
    disabled = VerdictSpans(tracer_provider(exporter, batch=False), enabled=False)
    rig = Rig(canary_server, folder, disabled)
    async with rig.service:
        (report,) = await rig.schedule.tick(0.0)
    assert report.cases == 5
    assert exporter.get_finished_spans() == ()


async def test_run_loop_sleeps_on_the_clock_until_stopped(
    canary_server: JudgeServer, rubrics_dir: tuple[Path, dict[str, str]]
) -> None:
    folder, _ = rubrics_dir
    rig = Rig(canary_server, folder)
    stop = asyncio.Event()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        rig.clock.advance(seconds)
        if len(slept) == 3:
            stop.set()
        await asyncio.sleep(0)

    schedule = CanarySchedule(
        rig.schedule.sets, rig.service, rig.metrics, clock=rig.clock, sleep=sleep
    )
    async with rig.service:
        await asyncio.wait_for(schedule.run(stop), timeout=60)
    # Runs at 0, 3600 and 7200 (then stopped while asleep): three runs, each an hour apart.
    assert slept == [3600.0, 3600.0, 3600.0]
    assert len(canary_server.requests) == 15


def test_missing_canary_files_stop_start_up(
    tmp_path: Path, rubrics_dir: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = rubrics_dir
    (folder / "canary" / "labels.jsonl").unlink()
    with pytest.raises(
        InputFileError, match=r"rubric refund-canary: canary: .*labels\.jsonl: no such file"
    ):
        load_sets(load_rubrics(folder), folder, 0.0)
    # `sidecar run` says so and exits 2 before it tries Kafka.
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "rubrics_dir": str(folder),
                "judge": {"backend": "openai", "openai_base_url": "http://127.0.0.1:9/v1"},
                "otel": {"enabled": False},
            }
        )
    )
    assert main(["run", "--config", str(config)]) == 2
    assert "labels.jsonl: no such file" in capsys.readouterr().err


def test_canary_block_does_not_change_the_rubric_hash(
    rubrics_dir: tuple[Path, dict[str, str]],
) -> None:
    folder, _ = rubrics_dir
    text = (folder / "refund.yaml").read_text()
    without = yaml.safe_load(text)
    without.pop("canary")
    (rubric,) = load_rubrics(folder)
    assert rubric.canary is not None
    assert rubric.content_hash == Rubric.model_validate(without).content_hash


@pytest.mark.parametrize(
    ("field", "points_to"),
    [
        ("traces", "/etc/passwd"),
        ("traces", "../outside.jsonl"),
        ("labels", "canary/../../outside.jsonl"),
        ("labels", "link.jsonl"),  # a symbolic link out of the folder
    ],
)
def test_canary_files_outside_the_rubric_folder_are_refused_naming_rubric_and_field(
    tmp_path: Path, rubrics_dir: tuple[Path, dict[str, str]], field: str, points_to: str
) -> None:
    folder, _ = rubrics_dir
    (tmp_path / "outside.jsonl").write_text("{}\n")
    (folder / "link.jsonl").symlink_to(tmp_path / "outside.jsonl")
    rubric = folder / "refund.yaml"
    text = rubric.read_text()
    old = "canary/traces.jsonl" if field == "traces" else "canary/labels.jsonl"
    rubric.write_text(text.replace(old, points_to))
    expected = "traces[0]" if field == "traces" else "labels"

    with pytest.raises(
        InputFileError,
        match=rf"rubric refund-canary: canary\.{re.escape(expected)}: .* is outside .*canary_root",
    ):
        load_sets(load_rubrics(folder), folder, 0.0)


def test_a_configured_canary_root_allows_files_beside_the_rubric_folder(
    tmp_path: Path, rubrics_dir: tuple[Path, dict[str, str]]
) -> None:
    folder, _ = rubrics_dir
    shared = tmp_path / "shared"
    (folder / "canary").rename(shared)
    rubric = folder / "refund.yaml"
    rubric.write_text(rubric.read_text().replace("canary/", "../shared/"))

    with pytest.raises(InputFileError, match="is outside"):
        load_sets(load_rubrics(folder), folder, 0.0)
    [canary] = load_sets(load_rubrics(folder), folder, 0.0, root=tmp_path)
    assert canary.rubric.id == "refund-canary"


async def test_canary_runs_feed_the_judge_stream_of_the_drift_detectors(
    canary_server: JudgeServer, rubrics_dir: tuple[Path, dict[str, str]]
) -> None:
    folder, _ = rubrics_dir
    rig = Rig(canary_server, folder)
    async with rig.service:
        await rig.schedule.tick(0.0)
        rig.clock.now = 3600.0
        await rig.schedule.tick(3600.0)
    streams = rig.metrics.drift.streams
    correct = streams[StreamKey("refund-canary", "criterion", "correct_amount")]
    # Ten canary cases, each with its human label, on the judge stream only.
    assert correct.canaries
    assert correct.judge.seen == 10
    assert correct.passes.seen == 0
    labels = {"rubric": "refund-canary", "criterion": "correct_amount", "stream": "judge"}
    assert rig.value("sidecar_drift_evalue", **labels) == 1.0  # still in its baseline
    where = {"rubric": "refund-canary", "criterion": "correct_amount"}
    assert rig.value("sidecar_drift_attribution", cause="none", **where) == 1.0
    assert rig.value("sidecar_drift_attribution", cause="judge", **where) == 0.0
