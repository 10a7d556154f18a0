"""Seeded simulated streams for the drift detectors: an agent, a judge, canary cases.

One rubric (``support``) with one judged criterion (``resolved``). Each
production case is truly good with the agent's quality; the judge calls a
good case FAIL with its false-negative rate and a bad case PASS with its
false-positive rate. Canary cases are drawn at random from a fixed labelled
set (the labels are the truth), and judged by the same judge. A change at
``change_s``: the agent's quality drops (``agent_drop``), the judge turns
stricter (``judge_strict``: more good cases called FAIL, also on the
canaries), or both. Cases arrive ``per_min`` a minute, canaries
``canary_per_min`` a minute; times are Unix seconds from ``T0``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from sidecar.drift.attribute import Observation
from sidecar.model import Outcome

T0 = 1_780_000_000.0
RUBRIC = "support"
CRITERION = "resolved"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    hours: float = 24.0
    change_s: float = 8 * 3600.0
    per_min: float = 10.0
    canary_per_min: float = 2.0
    quality: float = 0.85
    agent_drop: float = 0.0
    judge_fn: float = 0.05
    judge_fp: float = 0.05
    judge_strict: float = 0.0
    canary_good: float = 0.8
    canary_set: int = 100

    @property
    def drifted(self) -> bool:
        return self.agent_drop > 0 or self.judge_strict > 0

    @property
    def expected(self) -> str:
        if self.judge_strict > 0:
            return "judge"
        return "agent" if self.agent_drop > 0 else "none"


def _judge(good: bool, fn: float, fp: float, rng: random.Random) -> Outcome:
    if good:
        return Outcome.FAIL if rng.random() < fn else Outcome.PASS
    return Outcome.PASS if rng.random() < fp else Outcome.FAIL


def observations(s: Scenario, seed: int) -> Iterator[Observation]:
    """The scenario's verdicts and canary cases, in time order."""
    rng = random.Random(seed)
    labels = [rng.random() < s.canary_good for _ in range(s.canary_set)]
    end = s.hours * 3600.0
    step, canary_step = 60.0 / s.per_min, 60.0 / s.canary_per_min
    t, next_canary = 0.0, canary_step / 2
    while t < end:
        while next_canary <= t:
            after = next_canary >= s.change_s
            fn = s.judge_fn + (s.judge_strict if after else 0.0)
            good = labels[rng.randrange(s.canary_set)]
            label = Outcome.PASS if good else Outcome.FAIL
            yield Observation(
                time=T0 + next_canary,
                rubric=RUBRIC,
                scope="trace",
                results=(("criterion", CRITERION, _judge(good, fn, s.judge_fp, rng)),),
                judge_version="judge-1",
                labels={CRITERION: label},
            )
            next_canary += canary_step
        after = t >= s.change_s
        quality = s.quality - (s.agent_drop if after else 0.0)
        fn = s.judge_fn + (s.judge_strict if after else 0.0)
        outcome = _judge(rng.random() < quality, fn, s.judge_fp, rng)
        # A silent bump: the version the service reports does not change.
        yield Observation(
            time=T0 + t,
            rubric=RUBRIC,
            scope="trace",
            results=(("criterion", CRITERION, outcome),),
            judge_version="judge-1",
        )
        t += step


def record_lines(s: Scenario, seed: int) -> tuple[list[str], list[str]]:
    """The scenario as verdict record lines and canary record lines (what sidecar drift reads)."""
    verdicts: list[str] = []
    canaries: list[str] = []
    for n, o in enumerate(observations(s, seed)):
        ((_, name, outcome),) = o.results
        moment = datetime.fromtimestamp(o.time, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        record: dict[str, object] = {
            "trace_id": f"{n:032x}",
            "rubric_id": o.rubric,
            "rubric_version": "1",
            "judge_model": "judge",
            "trace_end": moment,
            "decided_at": moment,
            "outcome": "acceptable" if outcome is Outcome.PASS else "unacceptable",
            "checks": [],
            "criteria": [{"name": name, "outcome": outcome.value, "gate": True}],
            "judge_model_version": o.judge_version,
        }
        if o.labels is not None:
            record["canary"] = True
            record["labels"] = {k: v.value for k, v in o.labels.items()}
            canaries.append(json.dumps(record))
        else:
            verdicts.append(json.dumps(record))
    return verdicts, canaries
