"""What each remaining fast path of the evaluation core is worth, end to end.

A fast path stays only where it earns a large share of the end-to-end figure
(10% or more of the replay throughput), next to its general path in the same
module and held to it by a property test. This benchmark measures that share:
each variant turns one fast path off (the general path then does the work)
in its own process, and replays the same generated traces as ``bench_replay``
(judge off). Variants run in alternating rounds, so drift of a noisy machine
spreads over all of them; the figures are medians of rounds.

Every variant also prints the sha256 of its verdict records: a fast path that
changed a verdict would show a different digest, so the run doubles as an
agreement check over the whole replay.

    .venv/bin/python bench/bench_fast_paths.py [--traces 1000] [--rounds 5]

The variants (``--only NAME`` runs one in this process and prints its line):

- ``quick_grounding``: ``grounded_numbers`` first grounds the claims against
  the digit runs of the evidence (off: the whole evidence is read every time);
- ``record_builder``: hot frozen records are built through
  ``sidecar.fastrecord`` drafts (off: the dataclass constructor);
- ``sequential_replay``: without a judge, replay evaluates each trace in turn
  (off: a task and a queue per trace, as with a judge).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = (
    "all",
    "quick_grounding",
    "record_builder",
    "sequential_replay",
)


def _turn_off(variant: str) -> None:
    """Replace one fast path by its general path (before the core is imported, for builders)."""
    if variant == "record_builder":
        import sidecar.fastrecord as fastrecord

        def constructor(cls: type[Any], **_: object) -> Callable[..., Any]:
            return cls

        fastrecord.record_builder = constructor  # type: ignore[assignment]
        return
    if variant == "quick_grounding":
        import sidecar.evaluate.checks.grounding as grounding

        grounding.Evidence.QUICK = False


def run_variant(variant: str, traces: int, repeats: int) -> tuple[float, str]:
    """Median spans/s of the replay pipeline with ``variant`` off, and its verdicts' sha256."""
    _turn_off(variant)
    from sidecar.engine import offline
    from sidecar.evaluate.rubric import load_rubrics
    from sidecar.evaluate.sample import Sampler
    from sidecar.ingest.assemble import Assembler
    from sidecar.ingest.decode import decode
    from sidecar.model import DecideReason
    from sidecar.wire.verdicts import verdict_json
    from tests.agents.genai_spans import make_cases
    from tests.agents.otlp import split_requests
    from tests.integration.scenario import write_rubrics

    _turn_off(variant)  # the readers of modules imported just now
    cases = make_cases(traces, seed=1)
    records = [part for c in cases for part in split_requests(c.spans, 2)]
    with tempfile.TemporaryDirectory() as tmp:
        rubrics = load_rubrics(write_rubrics(Path(tmp)))

    def replay() -> tuple[int, list[Any]]:
        assembler = Assembler(decision_wait=0.0, max_trace_age=1e9, max_open_traces=10**9)
        spans, found = 0, []
        for record in records:
            decoded = decode(record)
            spans += len(decoded)
            found.extend(assembler.add(decoded, 0.0))
        found.extend(assembler.drain(DecideReason.FLUSH))
        source: Any = found
        if variant == "sequential_replay":
            source = offline._aiter(found)  # an async source takes the general path
        verdicts = asyncio.run(
            offline.evaluate_traces(
                source,
                rubrics,
                Sampler(judge_enabled=False),
                judge=None,
                summary=offline.ReplaySummary(),
            )
        )
        return spans, verdicts

    rates: list[float] = []
    verdicts: list[Any] = []
    for _ in range(repeats):
        start = time.perf_counter()
        spans, verdicts = replay()
        rates.append(spans / (time.perf_counter() - start))
    ordered = sorted(verdicts, key=lambda v: (v.trace_id, v.rubric_id))
    text = "".join(verdict_json(v) + "\n" for v in ordered)
    return statistics.median(rates), hashlib.sha256(text.encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2, help="replays per variant per round")
    parser.add_argument("--only", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only is not None:
        rate, digest = run_variant(args.only, args.traces, args.repeats)
        print(f"{args.only} {rate:.1f} {digest}")
        return
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    digests: dict[str, set[str]] = {v: set() for v in VARIANTS}
    for number in range(args.rounds):
        order = VARIANTS if number % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            command = [sys.executable, __file__, "--only", variant]
            command += ["--traces", str(args.traces), "--repeats", str(args.repeats)]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            _, rate, digest = line.split()
            rates[variant].append(float(rate))
            digests[variant].add(digest)
    base = statistics.median(rates["all"])
    print(f"traces {args.traces}, rounds {args.rounds}, replays per round {args.repeats}")
    print(f"{'turned off':<18} {'spans/s':>9} {'all / this':>10}  verdicts")
    for variant in VARIANTS:
        median = statistics.median(rates[variant])
        same = "same" if digests[variant] == digests["all"] else "DIFFERENT"
        label = "(none)" if variant == "all" else variant
        print(f"{label:<18} {median:9.0f} {base / median:10.3f}  {same}")
    print(f"bench_fast_paths: all={base:.0f} sha256={sorted(digests['all'])[0][:12]}")


if __name__ == "__main__":
    main()
