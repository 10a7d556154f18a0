"""The injection-hardened LLM judge: pure core and the backend protocol.

:class:`~sidecar.judge.service.JudgeService` implements :class:`Judge` over a
backend of ``sidecar.adapters``. The usual flow::

    screening = screen_case(rubric, transcript)          # screen.py, once per case
    request = build_request(rubric, transcript)          # prompt.py
    raw = <one model call with request.system_instruction, request.user_text,
           request.response_schema, temperature 0, no tools>
    criteria, error = parse_verdicts(raw, request, rubric)   # parse.py
    criteria, review = apply_injection_policy(criteria, screening, policy)

The screening is computed once per case by the pipeline, before sampling
(``always_judge: [injection_suspected]`` reads it), and handed to the judge
with the case; the judge never screens on its own. Transport failures, safety blocks and truncation use
:func:`all_error` with a reason instead of parsing. Results are cached by
``request.cache_key`` (:class:`VerdictCache`). Pairwise comparison (which
of two answers is better) has its own request and parser in
:mod:`sidecar.judge.pairwise`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from sidecar.evaluate.rubric import InjectionPolicy, Rubric
from sidecar.judge.cache import VerdictCache
from sidecar.judge.parse import all_error, parse_verdicts
from sidecar.judge.prompt import JudgeRequest, build_request, data_blocks, neutralise, new_nonce
from sidecar.judge.screen import Screening, screen, screen_case
from sidecar.model import CriterionResult, JudgeCallRecord, Outcome, Transcript

INJECTION_SUSPECTED = "injection_suspected"

__all__ = [
    "INJECTION_SUSPECTED",
    "Judge",
    "JudgeRequest",
    "JudgeResult",
    "Screening",
    "VerdictCache",
    "all_error",
    "apply_injection_policy",
    "build_request",
    "data_blocks",
    "neutralise",
    "new_nonce",
    "parse_verdicts",
    "screen",
    "screen_case",
]


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """What one judgment produced.

    ``judged`` is False when no model verdict was obtained (every criterion is
    then ERROR, ``error_reason`` says why). ``review`` is the injection
    policy's flag for the case's screening. ``raw_output`` is kept for the
    verdict record and ``sidecar judge``, never for metrics.
    ``model_version`` is what the model service says served the answer
    (``unknown`` when it did not say), or ``None`` when no answer arrived
    (transport failure, breaker open, nothing to judge).
    """

    criteria: tuple[CriterionResult, ...]
    judged: bool
    review: bool
    raw_output: str | None
    error_reason: str | None
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    nonce: str | None = None
    model_version: str | None = None
    # The judge reported that the data tried to instruct it (counted as injection_suspected).
    judge_flagged: bool = False
    # Each attempt at the model (or the cache hit) behind this result, for the judge's spans.
    calls: tuple[JudgeCallRecord, ...] = ()


class Judge(Protocol):
    """The judge: one rubric, one transcript and its screening, one structured verdict."""

    async def judge(
        self,
        rubric: Rubric,
        transcript: Transcript,
        screening: Screening,
        *,
        use_cache: bool = True,
    ) -> JudgeResult: ...

    async def wait_available(self) -> None:
        """Return once a call may be attempted again (after ``JudgeUnavailable`` under ``pause``)."""
        ...

    async def aclose(self) -> None:
        """Release HTTP connections."""
        ...


def apply_injection_policy(
    criteria: Iterable[CriterionResult], screening: Screening, policy: InjectionPolicy
) -> tuple[tuple[CriterionResult, ...], bool]:
    """Apply ``on_injection_suspected`` to a suspected case; returns (criteria, review).

    - ``review``: verdicts are kept; any PASS sets ``review`` so it is not
      trusted silently.
    - ``fail``: every gating PASS becomes FAIL with reason ``injection_suspected``.
    - ``error``: every PASS or FAIL becomes ERROR with that reason (an ERROR
      keeps its own, more specific reason).

    A case that is not suspected passes through unchanged with ``review`` False.
    """
    results = tuple(criteria)
    if not screening.suspected:
        return results, False
    match policy:
        case InjectionPolicy.REVIEW:
            return results, any(c.outcome is Outcome.PASS for c in results)
        case InjectionPolicy.FAIL:
            return (
                tuple(
                    dataclasses.replace(c, outcome=Outcome.FAIL, reason=INJECTION_SUSPECTED)
                    if c.gate and c.outcome is Outcome.PASS
                    else c
                    for c in results
                ),
                False,
            )
        case InjectionPolicy.ERROR:
            return (
                tuple(
                    dataclasses.replace(
                        c, outcome=Outcome.ERROR, evidence=None, reason=INJECTION_SUSPECTED
                    )
                    if c.outcome in (Outcome.PASS, Outcome.FAIL)
                    else c
                    for c in results
                ),
                False,
            )
