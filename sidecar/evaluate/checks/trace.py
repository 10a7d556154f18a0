"""Checks over the trace as a whole: ``max_latency_ms`` and ``no_error_spans``.

Latency is the root span's duration. When it cannot be known it is ERROR,
with the reason the transcript gives (``Transcript.latency_error``): the root
never arrived (a child's duration is not the run's), the root ends before it
starts (not 0 ms), or its id is shared by several spans.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field

from sidecar.evaluate.checks._common import Finding, errored, failed, passed
from sidecar.evaluate.checks.base import CheckConfig, CheckType, Limit, Part
from sidecar.model import Outcome, Transcript


class MaxLatencyMs(CheckConfig):
    type: Literal["max_latency_ms"]
    limit: Annotated[float, Field(gt=0, le=7 * 86_400_000), Limit]  # at most a week


class NoErrorSpans(CheckConfig):
    type: Literal["no_error_spans"]


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if value == int(value) else f"{value:.1f} ms"


def max_latency_ms(spec: MaxLatencyMs, transcript: Transcript) -> Finding:
    latency = transcript.latency_ms
    if latency is None:
        if transcript.latency_error:
            return errored(f"latency unknown: {transcript.latency_error}")
        return errored("latency unknown (root span not seen)")
    if not math.isfinite(latency):
        return errored(f"latency is not a number: {latency}")
    if latency > spec.limit:
        return failed(f"latency {_ms(latency)} > limit {_ms(spec.limit)}")
    return passed(f"latency {_ms(latency)} <= limit {_ms(spec.limit)}")


def no_error_spans(spec: NoErrorSpans, transcript: Transcript) -> Finding:
    errors = transcript.error_spans
    if not errors:
        return passed("no error spans")
    first = errors[0]
    # The count goes first so that cutting a long message keeps it.
    count = f"{len(errors)} error spans, first " if len(errors) > 1 else "error span "
    message = f": {first.message}" if first.message else ""
    return failed(f"{count}{first.name!r}{message}")


# Latency is the root span's: truncation cannot change it (a missing root is flagged apart). A lost span may have failed.
MAX_LATENCY_MS = CheckType(
    MaxLatencyMs,
    max_latency_ms,
    inconclusive_if_truncated=None,
    about_tools=False,
    reads=frozenset({Part.LATENCY}),
)
NO_ERROR_SPANS = CheckType(
    NoErrorSpans,
    no_error_spans,
    inconclusive_if_truncated=Outcome.PASS,
    about_tools=False,
    reads=frozenset({Part.ERROR_SPANS}),
)
