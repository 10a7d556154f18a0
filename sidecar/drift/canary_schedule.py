"""The service's canary runs: each rubric's ``canary:`` set re-judged on its schedule.

For every rubric with a ``canary: {traces, labels, every_s, cases_per_run}``
block (paths relative to the rubric file) the schedule loads the traces and
labels at start-up (a missing or unreadable file stops start-up, naming the
rubric) and then, on the injected clock:

- runs the first time at start-up, then every ``every_s`` seconds;
- judges ``cases_per_run`` traces per run, a deterministic rotation: the set
  sorted by trace id, run r taking the next ``cases_per_run`` after run r-1's,
  wrapping around, so every case is re-judged once per cycle;
- through the production judge service (its slots, rate limits, retries and
  breaker: :meth:`JudgeService.for_purpose`) with the verdict cache
  bypassed and the calls reported as canary calls (the ``sidecar_canary_judge_*``
  families). Canary verdicts are never emitted as verdicts: no verdict span
  in the case's trace, no verdict record, no production counter. With
  ``spans`` (the service's, when span export is on) each case gets a span of
  its own, ``canary {rubric}`` over its judge calls (:class:`CanarySpans`);
- reports each run (:class:`~sidecar.telemetry.CanaryRan`): per criterion
  ``kappa`` and ``agreement`` (against the labels, when defined),
  ``error_rate`` (ERROR share of the run's verdicts) and ``flip_rate`` (share
  of the run's cases whose PASS/FAIL differs from the last run that judged the
  same case; undefined until a case comes round again), each gated
  criterion's kappa threshold, the version that served most of the run's
  cases, and whether the run passed (the rule of :mod:`sidecar.drift.canary_set`).
  The Prometheus adapter shows them as ``sidecar_canary_agreement``,
  ``sidecar_canary_kappa_threshold`` and ``sidecar_canary_runs_total``; the
  report also carries each case's verdict (decided at the run's time) with
  its human labels, which feed the judge stream of the drift detectors
  (:mod:`sidecar.drift.attribute`).

Seams: ``clock`` and ``sleep``; tests call :meth:`CanarySchedule.tick` with
the time they choose.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sidecar.calibrate.inputs import parse_labels
from sidecar.calibrate.release_gate import DEFAULT_MAX_ERROR_RATE
from sidecar.drift.canary_set import (
    CanaryReport,
    canary_cases,
    canary_labels,
    canary_report,
    judge_canary,
)
from sidecar.engine.offline import ReplaySummary, collect_traces
from sidecar.errors import InputFileError, SidecarError
from sidecar.evaluate.pipeline import Case
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.verdict import Verdict
from sidecar.judge.service import JudgeService
from sidecar.model import Outcome
from sidecar.telemetry import CANARY, CanaryCriterion, CanaryRan, FaultRaised, Telemetry
from sidecar.wire.labels import HumanLabel

log = logging.getLogger(__name__)

NO_VERSION = "none"


@dataclass(slots=True)
class CanarySet:
    """One rubric's canary set and where its rotation stands."""

    rubric: Rubric
    cases: list[Case]  # sorted by trace id
    labels: list[HumanLabel]
    every_s: float
    per_run: int
    next_at: float
    runs: int = 0
    # (trace id, criterion) -> the last PASS/FAIL the judge gave it, for flips.
    previous: dict[tuple[str, str], Outcome] = field(default_factory=dict)

    def next_cases(self) -> list[Case]:
        """This run's slice of the rotation."""
        total = len(self.cases)
        if self.per_run >= total:
            return list(self.cases)
        start = (self.runs * self.per_run) % total
        return [self.cases[(start + i) % total] for i in range(self.per_run)]


def load_sets(
    rubrics: Sequence[Rubric], base: Path, now: float, root: Path | None = None
) -> list[CanarySet]:
    """The canary sets of ``rubrics``; their files are relative to ``base``, the rubric folder.

    Every file must lie inside ``root`` (``canary_root`` in the settings), by
    default ``base`` itself: a rubric cannot make the service read files
    elsewhere (an absolute path, ``../``, a symbolic link pointing out).
    """
    allowed = (root if root is not None else base).resolve()
    sets: list[CanarySet] = []
    for rubric in rubrics:
        spec = rubric.canary
        if spec is None or rubric.judge is None:
            continue
        trace_paths, label_path = spec.paths(base)
        where = f"rubric {rubric.id}: canary"
        fields = [*(f"traces[{i}]" for i in range(len(trace_paths))), "labels"]
        for name, path in zip(fields, (*trace_paths, label_path), strict=True):
            if not path.resolve().is_relative_to(allowed):
                raise InputFileError(
                    f"{where}.{name}: {path} is outside {allowed}; keep canary files in the "
                    "rubric folder, or set canary_root to a folder that holds them"
                )
            if not path.is_file():
                raise InputFileError(f"{where}: {path}: no such file")
        traces = collect_traces(trace_paths, ReplaySummary())
        if not traces:
            raise InputFileError(f"{where}: {', '.join(map(str, trace_paths))}: no traces")
        try:
            lines = label_path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputFileError(f"{where}: {label_path}: cannot read: {exc}") from exc
        labels = parse_labels(lines, str(label_path))
        cases = sorted(canary_cases(rubric, traces), key=lambda c: c.transcript.trace_id)
        sets.append(CanarySet(rubric, cases, labels, spec.every_s, spec.cases_per_run, now))
    return sets


class CanarySpans(Protocol):
    """Records one canary case's span and its judge calls (``VerdictSpans`` is one)."""

    def record_canary(self, verdict: Verdict) -> str | None: ...


class CanarySchedule:
    """Runs the canary sets when due; ``run(stop)`` in the service, ``tick(now)`` in tests."""

    def __init__(
        self,
        sets: Sequence[CanarySet],
        judge: JudgeService,
        telemetry: Telemetry,
        *,
        max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
        spans: CanarySpans | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.sets = list(sets)
        self._spans = spans
        self._judge = judge.for_purpose(CANARY)
        self._telemetry = telemetry
        self._max_error_rate = max_error_rate
        self._clock = clock
        self._sleep = sleep

    async def tick(self, now: float) -> list[CanaryReport]:
        """Run every set that is due at ``now``; their reports, in order."""
        reports: list[CanaryReport] = []
        for canary in self.sets:
            if now < canary.next_at:
                continue
            canary.next_at = now + canary.every_s
            try:
                reports.append(await self.run_once(canary))
            except asyncio.CancelledError:
                raise
            except (SidecarError, ValueError, OSError):
                # One broken run must not stop the others or the service.
                log.exception("canary run of rubric %s failed", canary.rubric.id)
                self._telemetry.event(FaultRaised("canary"))
        return reports

    async def run_once(self, canary: CanarySet) -> CanaryReport:
        cases = canary.next_cases()
        canary.runs += 1
        verdicts = await judge_canary(cases, self._judge)
        # Decided now, whenever the canary traces ran: the drift detectors read this time.
        decided = round(self._clock() * 1e9)
        verdicts = [dataclasses.replace(v, decided_at=decided) for v in verdicts]
        if self._spans is not None:
            for verdict in verdicts:
                self._spans.record_canary(verdict)
        report = canary_report(
            canary.rubric,
            verdicts,
            canary.labels,
            canary.previous,
            max_error_rate=self._max_error_rate,
        )
        for v in verdicts:
            for c in v.criteria:
                if c.outcome in (Outcome.PASS, Outcome.FAIL):
                    canary.previous[(v.trace_id, c.name)] = c.outcome
        self._telemetry.event(ran(report, verdicts, canary_labels(canary.labels)))
        if not report.passed:
            log.warning(
                "canary of rubric %s failed: %s", canary.rubric.id, "; ".join(report.reasons)
            )
        return report

    async def run(self, stop: asyncio.Event) -> None:
        """Run what is due until ``stop`` is set; a run in progress is cancelled then."""
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                work = asyncio.ensure_future(self.tick(self._clock()))
                await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not work.done():
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await work
                    return
                due = min((c.next_at for c in self.sets), default=None)
                if due is None:
                    return
                pause = asyncio.ensure_future(self._sleep(max(0.0, due - self._clock())))
                await asyncio.wait({pause, stopped}, return_when=asyncio.FIRST_COMPLETED)
                pause.cancel()
        finally:
            stopped.cancel()


def ran(
    report: CanaryReport,
    verdicts: Sequence[Verdict],
    labels: Mapping[str, Mapping[str, Outcome]] | None = None,
) -> CanaryRan:
    """What a run reports: per criterion statistics, the version that served most, the cases."""
    served = Counter(v.judge_model_version or NO_VERSION for v in verdicts)
    # The version that served most of the run (ties: the later name, so a new one shows).
    version = max(sorted(served), key=lambda name: served[name]) if served else NO_VERSION
    return CanaryRan(
        rubric=report.rubric,
        rubric_version=report.rubric_version,
        judge_model=report.judge_model,
        judge_model_version=version,
        passed=report.passed,
        criteria=tuple(
            CanaryCriterion(
                row.criterion,
                row.gate,
                row.threshold,
                {
                    "kappa": row.kappa,
                    "agreement": row.agreement,
                    "error_rate": row.error_rate,
                    "flip_rate": row.flip_rate,
                },
            )
            for row in report.criteria
        ),
        cases=tuple((v, labels.get(v.trace_id, {})) for v in verdicts) if labels else (),
    )
