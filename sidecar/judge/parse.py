"""Strict parsing of the judge's answer into per-criterion results.

The model is never trusted: every rubric criterion is reported, in rubric
order, and anything that is not a clean PASS or FAIL backed by a verbatim quote
becomes ERROR with a reason. Nothing malformed can come out as PASS.

Reasons (closed set, used as metric labels):

- whole answer: ``empty``, ``non_json``, ``bad_shape``;
- one criterion: ``missing``, ``bad_verdict``, ``conflict``, ``unsupported_evidence``.

Decisions where the design leaves room:

- the verdict must be exactly ``"PASS"`` or ``"FAIL"``; ``"pass"`` or ``"Pass"`` is
  ``bad_verdict`` (the schema says capitals, and a model that ignores it is
  not following the contract);
- the evidence ``NONE`` must be exactly that word (surrounding whitespace
  allowed); a quote is compared after collapsing whitespace runs and
  stripping, case-sensitively, and one pair of quotation marks around it is
  forgiven; ellipses are not (a quote with ``...`` in it is not verbatim);
- duplicates of one criterion with the same verdict and evidence are fine;
  any difference between them is ``conflict``;
- an entry whose ``criterion`` is not a rubric criterion is ignored, and so
  is an entry that is not an object or has no string ``criterion``;
- duplicate keys inside a JSON object make the answer ``bad_shape``, since
  which value the model meant is unknowable;
- a whole-answer code fence (```` ```json ... ``` ````) is accepted; any other
  text around the JSON is ``non_json``;
- ``data_tried_to_instruct`` must be a JSON boolean when present (anything
  else makes the answer ``bad_shape``); when absent it counts as not reported,
  never as false evidence of a clean case (answers cached or scripted before
  the field existed lack it);
- when the request's blocks were cut to the size cap, every PASS or FAIL
  carries the reason ``input_truncated``: the judge saw only part of the data.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from sidecar.evaluate.rubric import CriterionSpec, Rubric
from sidecar.judge.prompt import INSTRUCTION_FLAG, JudgeRequest, quotable_texts
from sidecar.model import CriterionResult, Outcome
from sidecar.text import may_hold_surrogates, repair

EMPTY = "empty"
NON_JSON = "non_json"
BAD_SHAPE = "bad_shape"
MISSING = "missing"
BAD_VERDICT = "bad_verdict"
CONFLICT = "conflict"
UNSUPPORTED_EVIDENCE = "unsupported_evidence"
INPUT_TRUNCATED = "input_truncated"

NO_EVIDENCE = "NONE"

_FENCE = re.compile(r"\A\s*```[A-Za-z]*[ \t]*\n(.*?)\n?[ \t]*```\s*\Z", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")
_QUOTE_PAIRS = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("`", "`"))


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _specs(rubric: Rubric) -> list[CriterionSpec]:
    if rubric.judge is None:
        raise ValueError(f"rubric {rubric.id!r} has no judge block")
    return list(rubric.judge.criteria)


def all_error(rubric: Rubric, reason: str) -> tuple[CriterionResult, ...]:
    """Every criterion ERROR with ``reason``: transport failure, safety block, policy."""
    if rubric.judge is None:
        return ()
    return tuple(
        CriterionResult(name=spec.name, outcome=Outcome.ERROR, gate=spec.gate, reason=reason)
        for spec in rubric.judge.criteria
    )


def normalise_whitespace(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _unquoted(evidence: str) -> str | None:
    for opening, closing in _QUOTE_PAIRS:
        if len(evidence) >= 2 and evidence.startswith(opening) and evidence.endswith(closing):
            return evidence[len(opening) : -len(closing)].strip()
    return None


def evidence_supported(evidence: str, haystacks: tuple[str, ...]) -> bool:
    """True when ``evidence`` is a verbatim (whitespace-normalised) quote of a haystack."""
    quote = normalise_whitespace(evidence)
    candidates = [quote]
    inner = _unquoted(quote)
    if inner is not None:
        candidates.append(inner)
    return any(c and any(c in text for text in haystacks) for c in candidates)


def _error(spec: CriterionSpec, reason: str) -> CriterionResult:
    return CriterionResult(name=spec.name, outcome=Outcome.ERROR, gate=spec.gate, reason=reason)


def _judge_one(
    spec: CriterionSpec, entries: list[dict[str, Any]], haystacks: tuple[str, ...]
) -> CriterionResult:
    if not entries:
        return _error(spec, MISSING)
    first = entries[0]
    if any(
        (e.get("verdict"), e.get("evidence")) != (first.get("verdict"), first.get("evidence"))
        for e in entries[1:]
    ):
        return _error(spec, CONFLICT)
    verdict = first.get("verdict")
    if verdict not in ("PASS", "FAIL"):
        return _error(spec, BAD_VERDICT)
    evidence = first.get("evidence")
    if not isinstance(evidence, str):
        return _error(spec, UNSUPPORTED_EVIDENCE)
    if evidence.strip() == NO_EVIDENCE:
        quote: str | None = None
    elif evidence_supported(evidence, haystacks):
        quote = normalise_whitespace(evidence)
    else:
        return _error(spec, UNSUPPORTED_EVIDENCE)
    outcome = Outcome.PASS if verdict == "PASS" else Outcome.FAIL
    return CriterionResult(name=spec.name, outcome=outcome, gate=spec.gate, evidence=quote)


def load_answer(raw: str | None) -> tuple[object, str | None]:
    """Parse a model's raw answer as JSON: (data, None), or (None, reason) when it cannot be.

    One code fence around the whole answer is allowed. A duplicate key
    anywhere is ``bad_shape``: the model would be saying two things at once.
    """
    if raw is None or not raw.strip():
        return None, EMPTY
    fenced = _FENCE.match(raw)
    try:
        text = fenced.group(1) if fenced else raw
        value = json.loads(text, object_pairs_hook=_no_duplicates)
        return (repair(value)[0] if may_hold_surrogates(text) else value), None
    except _DuplicateKey:
        return None, BAD_SHAPE
    except RecursionError:  # absurdly nested: not the agreed shape, and never a crash
        return None, BAD_SHAPE
    except ValueError:  # json.JSONDecodeError is a ValueError
        return None, NON_JSON


@dataclass(frozen=True, slots=True)
class ParsedAnswer:
    """The judge's answer read strictly.

    ``failure`` is the whole-answer reason (``None`` when the answer had the
    agreed shape). ``data_tried_to_instruct`` is the judge's own report,
    ``None`` when it gave none.
    """

    criteria: tuple[CriterionResult, ...]
    failure: str | None
    data_tried_to_instruct: bool | None = None

    @property
    def instructed(self) -> bool:
        """True only when the judge reported, as a boolean, that the data tried to instruct it."""
        return self.data_tried_to_instruct is True


def parse_answer(raw: str | None, request: JudgeRequest, rubric: Rubric) -> ParsedAnswer:
    """Per-criterion results in rubric order, the whole-answer reason, and the judge's flag."""
    specs = _specs(rubric)
    data, failure = load_answer(raw)
    if failure is not None:
        return ParsedAnswer(all_error(rubric, failure), failure)
    if not isinstance(data, dict) or not isinstance(data.get("criteria"), list):
        return ParsedAnswer(all_error(rubric, BAD_SHAPE), BAD_SHAPE)
    flag = data.get(INSTRUCTION_FLAG)
    if INSTRUCTION_FLAG in data and not isinstance(flag, bool):
        return ParsedAnswer(all_error(rubric, BAD_SHAPE), BAD_SHAPE)

    by_name: dict[str, list[dict[str, Any]]] = {spec.name: [] for spec in specs}
    for entry in data["criteria"]:
        if isinstance(entry, dict):
            name = entry.get("criterion")
            if isinstance(name, str) and name in by_name:
                by_name[name].append(entry)
    haystacks = tuple(normalise_whitespace(text) for text in quotable_texts(request))
    criteria = tuple(_judge_one(spec, by_name[spec.name], haystacks) for spec in specs)
    if request.truncated:
        criteria = tuple(
            dataclasses.replace(c, reason=INPUT_TRUNCATED)
            if c.outcome in (Outcome.PASS, Outcome.FAIL) and c.reason is None
            else c
            for c in criteria
        )
    return ParsedAnswer(criteria, None, flag if isinstance(flag, bool) else None)


def parse_verdicts(
    raw: str | None, request: JudgeRequest, rubric: Rubric
) -> tuple[tuple[CriterionResult, ...], str | None]:
    """Per-criterion results in rubric order, and the whole-answer error reason.

    The reason is ``None`` when the answer had the agreed shape, even if some
    criteria came out ERROR on their own (their ``reason`` says why). The
    judge's ``data_tried_to_instruct`` is in :func:`parse_answer`.
    """
    parsed = parse_answer(raw, request, rubric)
    return parsed.criteria, parsed.failure
