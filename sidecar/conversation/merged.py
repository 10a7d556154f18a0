"""One transcript for a whole conversation, made of its turns in start-time order.

The merged :class:`~sidecar.model.Transcript` is what every check type and
the judge read:

- ``turns``: the turns' own transcripts, in order (the judge shows each in its
  own blocks; ``max_turns`` counts them; ``grounded_numbers`` runs per turn);
- ``tool_calls``: every tool call of every turn, in order (``tool_*``,
  ``required_tool_calls``, ``max_tool_calls``);
- ``answer`` and ``user_input``: the last turn's (``answer_*`` check the last
  answer);
- ``error_spans``: all turns'; ``latency_ms``: the slowest turn's (unknown,
  with the reason, when any turn's is unknown);
- ``trace_id``, ``root_span_id``, agent, resource and root attributes: the
  last turn's, where the verdict span goes;
- times: the first turn's start and the last turn's end;
- models and conventions: each once, in order of first use; tokens summed;
- ``truncated`` and ``flags``: any turn's, plus the conversation's own (e.g.
  ``decided_early``); a conversation flagged ``partial`` (judged without some
  earlier turns) is truncated too, so checks that could be wrong for want of
  those turns are inconclusive.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sidecar.model import Flag, Transcript


def _once(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def _latency(turns: Sequence[Transcript]) -> tuple[float | None, str | None]:
    for number, turn in enumerate(turns, start=1):
        if turn.latency_ms is None:
            reason = turn.latency_error or "root span not seen"
            return None, f"turn {number}: {reason}"
    return max(t.latency_ms for t in turns if t.latency_ms is not None), None


def conversation_transcript(turns: Sequence[Transcript], flags: Iterable[Flag] = ()) -> Transcript:
    """The conversation of ``turns`` (already in order; at least one) as one transcript."""
    if not turns:
        raise ValueError("a conversation has at least one turn")
    last = turns[-1]
    latency, latency_error = _latency(turns)
    all_flags = [f for t in turns for f in t.flags]
    all_flags.extend(flags)
    return Transcript(
        trace_id=last.trace_id,
        root_span_id=last.root_span_id,
        agent_name=last.agent_name,
        agent_version=last.agent_version,
        user_input=last.user_input,
        tool_calls=tuple(c for t in turns for c in t.tool_calls),
        answer=last.answer,
        models=_once(m for t in turns for m in t.models),
        input_tokens=sum(t.input_tokens for t in turns),
        output_tokens=sum(t.output_tokens for t in turns),
        latency_ms=latency,
        error_spans=tuple(e for t in turns for e in t.error_spans),
        conventions=_once(c for t in turns for c in t.conventions),
        resource=last.resource,
        root_attributes=last.root_attributes,
        reference=next((t.reference for t in reversed(turns) if t.reference is not None), None),
        truncated=any(t.truncated for t in turns) or Flag.PARTIAL in all_flags,
        flags=tuple(dict.fromkeys(all_flags)),
        latency_error=latency_error,
        start_unix_nano=turns[0].start_unix_nano,
        end_unix_nano=last.end_unix_nano,
        turns=tuple(turns),
    )
