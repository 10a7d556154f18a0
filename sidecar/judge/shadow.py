"""The shadow judge: a candidate model re-judges a share of the judged cases, off the verdict path.

:class:`ShadowJudge` is the :class:`~sidecar.judge.Judge` the pipeline
calls when ``judge.shadow`` is on. For each case it:

1. builds the judge request once and has the primary judge it (the verdict
   is the primary's, always);
2. when the primary judged the case and the case is in the shadow's share
   (:func:`~sidecar.drift.shadow_agreement.shadow_selected` on its trace or
   conversation id), starts a background task that sends the *same* request
   (same data blocks, same nonce, same hardening) to the shadow model, parses
   it with the same strict parser and applies the same injection policy;
3. returns the primary's result at once.

The shadow task reports a :class:`~sidecar.telemetry.ShadowJudged` with each
criterion as both judges decided it, which the metrics adapter turns into
kappa, outcome counters and the disagreement detector
(:mod:`sidecar.drift.shadow_agreement`). The shadow's calls go through their own
:class:`~sidecar.judge.service.JudgeService` (the shadow model has its own
provider quota): its own slots (``shadow.concurrency``), rate limits and
circuit breaker, no cache, calls reported under purpose ``shadow`` so that
production figures hold production calls only. The shadow never waits on
the judge-unavailable policy: a failed shadow call is an ``error`` outcome.

Bounded: at most ``shadow.max_inflight`` shadow tasks wait or run; a case
chosen beyond that is dropped and counted (``ShadowDropped``, reason
``over_budget``), so a slow shadow model never holds up verdicts. On close, the
shadow tasks get ``close_wait_s`` (5 s) to finish; those still running are cancelled and counted (reason ``shutdown``);
a shadow call that raised is logged and counted (reason ``failed``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sidecar.drift.shadow_agreement import shadow_selected
from sidecar.errors import JudgeUnavailable
from sidecar.evaluate.rubric import Rubric
from sidecar.judge import JudgeResult
from sidecar.judge.config import ShadowSettings
from sidecar.judge.prompt import JudgeRequest
from sidecar.judge.screen import Screening
from sidecar.judge.service import JudgeService
from sidecar.model import Transcript
from sidecar.telemetry import NullTelemetry, ShadowDropped, ShadowJudged, Telemetry

log = logging.getLogger(__name__)

OVER_BUDGET = "over_budget"
SHUTDOWN = "shutdown"
FAILED = "failed"  # the shadow call raised (a fault, logged)

# Told of each finished shadow judgment (the shadow's spans).
OnShadow = Callable[[ShadowJudged, JudgeResult], None]


class ShadowJudge:
    """The primary judge, with a share of its judged cases judged again by ``shadow``."""

    def __init__(
        self,
        primary: JudgeService,
        shadow: JudgeService,
        settings: ShadowSettings,
        telemetry: Telemetry | None = None,
        *,
        on_shadow: OnShadow | None = None,
        close_wait_s: float = 5.0,
    ) -> None:
        if not settings.enabled or settings.model is None:
            raise ValueError("ShadowJudge needs judge.shadow.model and a share above 0")
        self._primary = primary
        self._shadow = shadow
        self._settings = settings
        self._model = settings.model
        self._telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self._on_shadow = on_shadow
        self._close_wait_s = close_wait_s
        # Each running shadow task and its rubric (for the drop count at shutdown).
        self._tasks: dict[asyncio.Task[None], str] = {}

    @property
    def primary(self) -> JudgeService:
        return self._primary

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    async def judge(
        self,
        rubric: Rubric,
        transcript: Transcript,
        screening: Screening,
        *,
        use_cache: bool = True,
    ) -> JudgeResult:
        request = self._primary.request(rubric, transcript)
        result = await self._primary.judge_request(rubric, request, screening, use_cache=use_cache)
        judge = rubric.judge
        if (
            result.judged
            and judge is not None
            and judge.model != self._model
            and shadow_selected(transcript.trace_id, self._settings.share)
        ):
            self._start(rubric, transcript.trace_id, request, screening, result)
        return result

    def _start(
        self,
        rubric: Rubric,
        trace_id: str,
        request: JudgeRequest,
        screening: Screening,
        primary: JudgeResult,
    ) -> None:
        if len(self._tasks) >= self._settings.max_inflight:
            self._telemetry.event(ShadowDropped(rubric.id, OVER_BUDGET))
            return
        task = asyncio.create_task(
            self._run(rubric, trace_id, request, screening, primary),
            name=f"shadow-judge {trace_id}",
        )
        self._tasks[task] = rubric.id
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _run(
        self,
        rubric: Rubric,
        trace_id: str,
        request: JudgeRequest,
        screening: Screening,
        primary: JudgeResult,
    ) -> None:
        assert rubric.judge is not None
        candidate = rubric.model_copy(
            update={"judge": rubric.judge.model_copy(update={"model": self._model})}
        )
        try:
            result = await self._shadow.judge_request(
                candidate, request, screening, use_cache=False
            )
        except JudgeUnavailable as exc:  # the pause policy: a shadow never waits
            result = self._shadow.unavailable(candidate, request, exc.reason)
        except Exception:  # a shadow's fault is logged and counted, never the service's end
            log.exception("shadow judge call for trace %s failed", trace_id)
            self._telemetry.event(ShadowDropped(rubric.id, FAILED))
            return
        by_name = {c.name: c.outcome for c in result.criteria}
        event = ShadowJudged(
            rubric=rubric.id,
            trace_id=trace_id,
            model=rubric.judge.model,
            shadow_model=self._model,
            shadow_model_version=result.model_version,
            pairs=tuple(
                (c.name, c.outcome, by_name[c.name]) for c in primary.criteria if c.name in by_name
            ),
            error=result.error_reason,
        )
        self._telemetry.event(event)
        if self._on_shadow is not None:
            self._on_shadow(event, result)

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until no shadow task runs (tests, shutdown); False when ``timeout_s`` ran out.

        Waiting never cancels a task (``asyncio.wait``, not a timeout around ``gather``).
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while self._tasks:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            await asyncio.wait(list(self._tasks), timeout=remaining)
        return True

    async def wait_available(self) -> None:
        await self._primary.wait_available()

    async def aclose(self) -> None:
        """Wait up to ``close_wait_s`` for the shadow tasks, cancel the rest (counted), close."""
        await self.drain(self._close_wait_s)
        running = list(self._tasks.items())
        for task, rubric in running:
            if task.cancel():
                self._telemetry.event(ShadowDropped(rubric, SHUTDOWN))
        await asyncio.gather(*(task for task, _ in running), return_exceptions=True)
        await self._primary.aclose()
