"""Send one planned case to the judge (or not) and conclude its verdict.

Policy for a judge that cannot be reached is the judge's own
(``on_judge_unavailable``): with ``error`` it returns ERROR criteria; with
``pause`` it raises :class:`~sidecar.errors.JudgeUnavailable`, and the case
waits here until the judge recovers. Meanwhile the case stays in flight, so
the service's in-flight bound pauses the Kafka partitions: back-pressure, not
loss.
"""

from __future__ import annotations

import logging

from sidecar.errors import JudgeUnavailable
from sidecar.evaluate import Case, conclude
from sidecar.judge import Judge, JudgeResult
from sidecar.judge.parse import all_error
from sidecar.verdict import Verdict

log = logging.getLogger(__name__)


def not_captured(case: Case) -> JudgeResult:
    """No answer text was captured: the judge cannot grade it, so every criterion is ERROR."""
    return JudgeResult(
        criteria=all_error(case.rubric, "not_captured"),
        judged=False,
        injection_suspected=case.injection_suspected,
        review=False,
        raw_output=None,
        error_reason="not_captured",
        model=case.rubric.judge_model,
    )


async def judge_case(case: Case, judge: Judge | None) -> Verdict:
    if not case.sample.judge or judge is None:
        return conclude(case, None)
    if case.transcript.answer is None:
        return conclude(case, not_captured(case))
    while True:
        try:
            result = await judge.judge(case.rubric, case.transcript)
        except JudgeUnavailable as exc:
            log.warning(
                "judge unavailable (%s); case %s waits", exc.reason, case.transcript.trace_id
            )
            await judge.wait_available()
            continue
        return conclude(case, result)
