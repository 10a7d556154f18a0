"""The review record: a case sent to people on the review topic (``review.topic``).

``{"v", "trace_id", "reasons", "verdict", "transcript"}``: why the case was
routed (:mod:`sidecar.calibrate.review`), its verdict record
(:mod:`sidecar.wire.verdicts`) and what the agent did: agent, input, tool
calls (name, call id, arguments, result, error, untrusted), answer, models,
latency. The content fields of both pass through one
:class:`~sidecar.wire.redaction.Redaction`; the transcript says ``redacted``
too when its content was hashed or dropped.

Written by :func:`review_json` (plain dict building, as the verdict record);
read by :class:`ReviewRecord`. ``v`` is :data:`REVIEW_RECORD_VERSION`;
records without it are of earlier releases and read as version 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar

from sidecar.evaluate.verdict import Verdict
from sidecar.model import Transcript
from sidecar.wire._base import ITEMS, Record, Texts, left_out_when_none, record_json
from sidecar.wire.redaction import DEFAULT_REDACTION, Redaction
from sidecar.wire.verdicts import VerdictRecord, verdict_dict

REVIEW_RECORD_VERSION = 1


class ToolCallRecord(Record):
    name: str
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    error: str | None = None
    untrusted: bool = False


class TranscriptRecord(Record):
    agent: str | None = None
    agent_version: str | None = None
    user_input: str | None = None
    tool_calls: Annotated[tuple[ToolCallRecord, ...], ITEMS] = ()
    answer: str | None = None
    models: Texts = ()
    latency_ms: float | None = None
    redacted: str | None = left_out_when_none()


class ReviewRecord(Record):
    """A case routed to human review, as read back (see the module docstring)."""

    FAMILY: ClassVar[str] = "review record"
    VERSION: ClassVar[int] = REVIEW_RECORD_VERSION

    v: int = REVIEW_RECORD_VERSION
    trace_id: str
    reasons: Texts
    verdict: VerdictRecord
    transcript: TranscriptRecord


def transcript_dict(t: Transcript, redaction: Redaction = DEFAULT_REDACTION) -> dict[str, Any]:
    """What the review record keeps of a transcript, content redacted."""
    r = redaction.text
    record: dict[str, Any] = {
        "agent": t.agent_name,
        "agent_version": t.agent_version,
        "user_input": r(t.user_input),
        "tool_calls": [
            {
                "name": c.name,
                "call_id": c.call_id,
                "arguments": r(c.arguments),
                "result": r(c.result),
                "error": r(c.error),
                "untrusted": c.untrusted,
            }
            for c in t.tool_calls
        ],
        "answer": r(t.answer),
        "models": list(t.models),
        "latency_ms": t.latency_ms,
    }
    if redaction.marker is not None:
        record["redacted"] = redaction.marker
    return record


def review_json(
    verdict: Verdict,
    transcript: Transcript,
    reasons: Iterable[str],
    redaction: Redaction = DEFAULT_REDACTION,
) -> str:
    """The review record of a case as one JSON line, content redacted."""
    return record_json(
        {
            "v": REVIEW_RECORD_VERSION,
            "trace_id": verdict.trace_id,
            "reasons": list(reasons),
            "verdict": verdict_dict(verdict, redaction),
            "transcript": transcript_dict(transcript, redaction),
        }
    )
