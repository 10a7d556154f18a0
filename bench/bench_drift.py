"""Drift detection on seeded simulated streams: the betting detectors against two baselines.

Methods, each given the same streams (``tests.drift_streams``: one judged
criterion, production cases and canary cases with human labels):

- ``e-process``: :class:`sidecar.drift.attribute.DriftMonitor`, the service's
  and ``sidecar drift``'s detectors with their default settings (alpha 0.01)
  and the guard-window attribution;
- ``z-test``: a rolling one-sided z-test, checked every 5 minutes, of the
  last hour's pass rate against the baseline's (the first 1000 cases), alarm
  at z >= 2.33 (1% per look); the same z-test on the canaries' disagreement
  (last hour against the first 400 canary cases) and the same guard rule for
  attribution;
- ``threshold``: the old ``SidecarPassRateDrop`` rule: the last hour's pass
  ratio 0.10 under the ratio of everything before it, with at least 50 cases
  in the hour, for 30 minutes (checked every 5 minutes). It cannot attribute:
  every alarm reads as the agent's.

Scenarios: drift-free at low (3 cases a minute) and high (30) volume; agent
drops of 0.05, 0.10, 0.20 in quality; a silent judge bump (the judge calls
20% of good cases FAIL, also on the canaries); both at once. Reported per
method x scenario: the false-alarm rate (runs with an alarm before the change,
or at all on drift-free streams), the median detection delay in production
cases after the change (alarms before it do not count), the share detected,
and the attribution accuracy (the first alarm after the change names the
expected cause: agent for agent drops, judge when the judge moved).

    .venv/bin/python bench/bench_drift.py [--runs 40] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sidecar.drift.attribute import DriftMonitor, DriftSettings, Observation  # noqa: E402
from sidecar.model import Outcome  # noqa: E402
from tests.drift_streams import T0, Scenario, observations  # noqa: E402


def _low(name: str, agent_drop: float = 0.0, judge_strict: float = 0.0) -> Scenario:
    return Scenario(
        name, 36.0, 12 * 3600.0, 3.0, 1.0, agent_drop=agent_drop, judge_strict=judge_strict
    )


def _high(name: str, agent_drop: float = 0.0, judge_strict: float = 0.0) -> Scenario:
    return Scenario(
        name, 16.0, 8 * 3600.0, 30.0, 2.0, agent_drop=agent_drop, judge_strict=judge_strict
    )


SCENARIOS = [
    _low("drift-free, low volume"),
    _high("drift-free, high volume"),
    _high("agent -0.05", agent_drop=0.05),
    _high("agent -0.10", agent_drop=0.10),
    _high("agent -0.20", agent_drop=0.20),
    _low("agent -0.10, low volume", agent_drop=0.10),
    _high("judge bump", judge_strict=0.2),
    _low("judge bump, low volume", judge_strict=0.2),
    _high("agent -0.10 + judge bump", agent_drop=0.10, judge_strict=0.2),
]
METHODS = ("e-process", "z-test", "threshold")
GUARD_S = DriftSettings().guard_s
Z = 2.33


@dataclass(frozen=True, slots=True)
class Found:
    """A method's alarms on one run: (time, attribution), in time order."""

    alarms: tuple[tuple[float, str], ...]


def _eprocess(stream: Iterable[Observation]) -> Found:
    monitor = DriftMonitor()
    monitor.observe_all(stream)
    monitor.finish()
    return Found(tuple(sorted((d.time, d.attribution) for d in monitor.decisions)))


class _Window:
    """Outcomes of the last hour, with a running count."""

    def __init__(self) -> None:
        self.items: deque[tuple[float, bool]] = deque()
        self.hits = 0

    def add(self, t: float, x: bool) -> None:
        self.items.append((t, x))
        self.hits += x

    def trim(self, now: float, span: float = 3600.0) -> None:
        while self.items and self.items[0][0] <= now - span:
            self.hits -= self.items.popleft()[1]


def _z(base_hits: int, base_n: int, hits: int, n: int) -> float:
    # One-sided: how far the window's rate is *below* the baseline's (pooled variance).
    if n == 0 or base_n == 0:
        return 0.0
    pooled = (base_hits + hits) / (base_n + n)
    var = pooled * (1 - pooled) * (1 / base_n + 1 / n)
    return 0.0 if var <= 0 else (base_hits / base_n - hits / n) / math.sqrt(var)


def _classic(stream: Iterable[Observation]) -> tuple[Found, Found]:
    """The rolling z-test (with canary z-test and guard rule) and the threshold rule."""
    main, canary = _Window(), _Window()
    base = [0, 0]  # hits, n of the first 1000 production cases
    cbase = [0, 0]  # agreements, n of the first 400 canary cases
    before = [0, 0]  # everything before the current hour (threshold rule's baseline)
    next_look = None
    z_agent: list[float] = []
    z_judge: list[float] = []
    threshold: list[float] = []
    held = 0
    for o in stream:
        ((_, _, outcome),) = o.results
        if outcome not in (Outcome.PASS, Outcome.FAIL):
            continue
        if o.labels is not None:
            agree = (outcome is Outcome.PASS) == (o.labels["resolved"] is Outcome.PASS)
            if cbase[1] < 400:
                cbase[0] += agree
                cbase[1] += 1
            else:
                canary.add(o.time, agree)
            continue
        passed = outcome is Outcome.PASS
        if base[1] < 1000:
            base[0] += passed
            base[1] += 1
        main.add(o.time, passed)
        if next_look is None:
            next_look = o.time + 300
        if o.time < next_look:
            continue
        next_look += 300
        dropped = [x for t, x in main.items if t <= o.time - 3600]
        before[0] += sum(dropped)
        before[1] += len(dropped)
        main.trim(o.time)
        canary.trim(o.time)
        if base[1] >= 1000 and _z(base[0], base[1], main.hits, len(main.items)) >= Z:
            z_agent.append(o.time)
        if cbase[1] >= 400 and _z(cbase[0], cbase[1], canary.hits, len(canary.items)) >= Z:
            z_judge.append(o.time)
        n = len(main.items)
        ok = before[1] > 0 and n >= 50 and main.hits / n < before[0] / before[1] - 0.10
        held = held + 1 if ok else 0
        if held == 7:  # true at 7 looks in a row: 30 minutes
            threshold.append(o.time)
    # The z-test's alarms: the first look of each run of alarming looks.
    agent_alarms = _starts(z_agent)
    judge_alarms = _starts(z_judge)
    z_found: list[tuple[float, str]] = [(t, "judge") for t in judge_alarms]
    for t in agent_alarms:
        near = any(abs(t - j) <= GUARD_S for j in judge_alarms)
        z_found.append((t, "judge" if near else "agent"))
    return Found(tuple(sorted(z_found))), Found(tuple((t, "agent") for t in threshold))


def _starts(times: list[float]) -> list[float]:
    return [t for i, t in enumerate(times) if i == 0 or t - times[i - 1] > 300]


def one_run(args: tuple[int, int]) -> dict[str, Found]:
    index, seed = args
    s = SCENARIOS[index]
    z, threshold = _classic(observations(s, seed))
    return {"e-process": _eprocess(observations(s, seed)), "z-test": z, "threshold": threshold}


@dataclass(slots=True)
class Row:
    false_alarms: int = 0
    detected: int = 0
    right: int = 0
    delays: list[float] | None = None


def summarise(s: Scenario, runs: list[dict[str, Found]]) -> dict[str, Row]:
    change = T0 + s.change_s
    rows: dict[str, Row] = {}
    for method in METHODS:
        row = rows[method] = Row(delays=[])
        for found in runs:
            alarms = found[method].alarms
            if any(t < change for t, _ in alarms) or (not s.drifted and alarms):
                row.false_alarms += 1
            after = [(t, cause) for t, cause in alarms if t >= change]
            if s.drifted and after:
                row.detected += 1
                t, cause = after[0]
                assert row.delays is not None
                row.delays.append((t - change) / 60.0 * s.per_min)
                row.right += cause == s.expected
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="seeded runs per scenario")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    args = parser.parse_args()
    started = time.perf_counter()
    work = [(i, seed) for i in range(len(SCENARIOS)) for seed in range(args.runs)]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, work, chunksize=4))
    print(f"{args.runs} runs per scenario, alpha 0.01, guard {GUARD_S / 3600:.0f} h")
    header = f"{'scenario':<28} {'method':<10} {'false alarms':>12} {'detected':>9}"
    print(header + f" {'median delay (cases)':>21} {'attribution':>12} {'delay / z-test':>15}")
    for i, s in enumerate(SCENARIOS):
        runs = results[i * args.runs : (i + 1) * args.runs]
        rows = summarise(s, runs)
        z_delay = statistics.median(rows["z-test"].delays or [math.nan])
        for method in METHODS:
            row = rows[method]
            delays = row.delays or []
            median = statistics.median(delays) if delays else math.nan
            detected = f"{row.detected}/{args.runs}" if s.drifted else "-"
            right = f"{row.right}/{row.detected}" if s.drifted and row.detected else "-"
            ratio = median / z_delay if s.drifted and delays and z_delay else math.nan
            print(
                f"{s.name:<28} {method:<10} {row.false_alarms / args.runs:>12.3f} {detected:>9}"
                f" {median:>21.0f} {right:>12} {ratio:>15.2f}"
            )
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
