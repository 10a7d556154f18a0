"""``sidecar drift --verdicts FILE... [--canary FILE...]``: drift alarms with attribution, offline.

Reads verdict records (``sidecar replay``/``backfill`` output, or the verdict
topic) and canary records (``sidecar canary --records``), puts them in time
order (``decided_at``, else ``trace_end``; records with neither are left out
and counted), and runs the service's detectors (:mod:`sidecar.drift.attribute`)
over them: per rubric x gated check or criterion x scope, the pass rate
(down), the ERROR share (up) and, on canary records, the judge's
disagreement with the human labels (up). Each alarm is printed with its time,
stream, direction, attribution (``agent``, ``judge``) and evidence (e-value
and rates). Alarms still inside their guard window at end of input are
decided with what is known. The detectors' settings are the ``drift:`` block
of the service's settings (``--config FILE``, ``SIDECAR_DRIFT__*``); the
flags override it.

``--json OUT`` writes ``{"alarms": [{"time", "rubric", "name", "kind",
"scope", "agent_version", "stream", "measure", "direction", "attribution", "evidence"}],
"streams": N, "records": N, "untimed": N}``. Exit 1 when any alarm was
raised, 0 when none, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from sidecar.calibrate.inputs import parse_verdicts
from sidecar.commands._io import consoles, read_lines, write_output
from sidecar.drift.attribute import (
    DEFAULT_CANARY_BASELINE,
    DEFAULT_GUARD_S,
    RETIRE_AFTER_S,
    Decision,
    DriftMonitor,
    DriftSettings,
    Observation,
    drift_settings,
    record_observation,
)
from sidecar.drift.detect import DEFAULT_ALPHA, DEFAULT_BASELINE
from sidecar.errors import InputFileError, UsageError
from sidecar.settings import load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "drift",
        help="anytime-valid drift alarms over verdict and canary records, agent or judge",
        description=(
            "Run the drift detectors over verdict records (and canary records) in time order, "
            "and print each alarm with its attribution: agent (the agent's pass rate moved while "
            "the judge held steady on the canaries) or judge. Exit 1 when any alarm was raised."
        ),
    )
    parser.add_argument(
        "--verdicts",
        "--records",
        dest="verdicts",
        type=Path,
        nargs="+",
        required=True,
        metavar="FILE",
        help="verdict records (sidecar replay or backfill output)",
    )
    parser.add_argument(
        "--canary",
        "--canary-records",
        dest="canary",
        type=Path,
        nargs="+",
        default=[],
        metavar="FILE",
        help="canary records (sidecar canary --records output)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        metavar="A",
        help=f"false-alarm level of each detector (default: drift.alpha, {DEFAULT_ALPHA})",
    )
    parser.add_argument(
        "--guard",
        type=float,
        metavar="SECONDS",
        help=(
            "a judge alarm this close to an agent alarm makes it the judge's "
            f"(default: drift.guard_s, {DEFAULT_GUARD_S:.0f})"
        ),
    )
    parser.add_argument(
        "--baseline",
        type=int,
        metavar="N",
        help=(
            "verdicts of each stream that set its baseline "
            f"(default: drift.baseline, {DEFAULT_BASELINE})"
        ),
    )
    parser.add_argument(
        "--canary-baseline",
        type=int,
        metavar="N",
        help=(
            "canary cases that set the judge's baseline "
            f"(default: drift.canary_baseline, {DEFAULT_CANARY_BASELINE})"
        ),
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML settings file whose drift: block gives the defaults of the flags above",
    )
    parser.add_argument(
        "--json", dest="json_out", metavar="OUT", help="write the JSON result ('-' for stdout)"
    )
    parser.set_defaults(handler=run, error_prefix=parser.prog)


def _settings(args: argparse.Namespace) -> DriftSettings:
    """The ``drift:`` block of the settings (``--config``, ``SIDECAR_DRIFT__*``), the flags winning."""
    found = drift_settings(load_settings(args.config).drift)
    if args.alpha is not None and not 0.0 < args.alpha < 1.0:
        raise UsageError(f"--alpha must be between 0 and 1 (exclusive), got {args.alpha}")
    if args.guard is not None and not 0 <= args.guard < math.inf:
        raise UsageError(f"--guard must be 0 or more seconds, got {args.guard}")
    for flag, value in (("--baseline", args.baseline), ("--canary-baseline", args.canary_baseline)):
        if value is not None and value < 2:
            raise UsageError(f"{flag} must be at least 2, got {value}")
    if args.alpha is not None:
        found = replace(found, alpha=args.alpha)
    if args.guard is not None:
        found = replace(found, guard_s=args.guard)
    if args.baseline is not None:
        # A new bettor joins twice per baseline, as with the defaults.
        found = replace(found, baseline=args.baseline, every=max(1, args.baseline // 2))
    if args.canary_baseline is not None:
        found = replace(
            found,
            canary_baseline=args.canary_baseline,
            canary_every=max(1, args.canary_baseline // 4),
        )
    return found


def _read(paths: list[Path], canary: bool, err: Any) -> tuple[list[Observation], int, int]:
    found: list[Observation] = []
    untimed = records = 0
    for path in paths:
        if not path.is_file():
            raise InputFileError(f"{path}: no such file")
        for record in parse_verdicts(read_lines(path, err), str(path)):
            records += 1
            if record.canary != canary:
                what = "a canary record" if record.canary else "not a canary record"
                where = "--canary" if record.canary else "--verdicts"
                raise InputFileError(
                    f"{path}: trace {record.trace_id} is {what}; give it with {where}"
                )
            observation = record_observation(record)
            if observation is None:
                untimed += 1
            else:
                found.append(observation)
    return found, records, untimed


def run(args: argparse.Namespace) -> int:
    stdout, err = consoles()
    settings = _settings(args)
    verdicts, n_verdicts, untimed = _read(args.verdicts, False, err)
    canaries, n_canaries, untimed_canaries = _read(args.canary, True, err)
    if n_verdicts == 0:
        raise InputFileError(f"{', '.join(map(str, args.verdicts))}: no verdict records")
    # Stable: records of the same moment keep their file order, verdicts before canaries.
    ordered = sorted(verdicts + canaries, key=lambda o: o.time)
    monitor = DriftMonitor(settings)
    monitor.observe_all(ordered)
    monitor.finish()
    alarms = sorted(monitor.decisions, key=lambda d: (d.time, d.key))
    out = err if args.json_out == "-" else stdout
    _print(alarms, monitor, out)
    skipped = untimed + untimed_canaries
    if skipped:
        err.print(
            f"[yellow]warning:[/] {skipped} record(s) have neither decided_at nor trace_end and "
            "were left out; records written by sidecar replay, backfill or run carry them",
            highlight=False,
        )
    if monitor.retired:
        err.print(
            f"[yellow]warning:[/] {monitor.retired} stream(s) were retired after "
            f"{RETIRE_AFTER_S / 86400:.0f} days without a verdict; one fed again started over "
            "with a new baseline",
            highlight=False,
        )
    if monitor.dropped:
        err.print(
            f"[yellow]warning:[/] more than {settings.max_streams} streams in use; "
            f"{monitor.dropped} results of the rest were left out",
            highlight=False,
        )
    if args.json_out:
        document = {
            "alarms": [d.to_json() for d in alarms],
            "streams": len(monitor.streams),
            "records": n_verdicts + n_canaries,
            "untimed": skipped,
        }
        write_output(args.json_out, json.dumps(document, indent=2) + "\n", sys.stdout)
    return 1 if alarms else 0


def _print(alarms: list[Decision], monitor: DriftMonitor, console: Any) -> None:
    canaried = sum(s.canaries for s in monitor.streams.values())
    console.print(
        f"drift: {len(monitor.streams)} streams ({canaried} watched by canaries), "
        f"{len(alarms)} alarm(s)",
        highlight=False,
    )
    for d in alarms:
        j = d.to_json()
        e = j["evidence"]
        console.print(
            f"{j['time']}  {d.key.rubric} {d.key.kind} {d.key.name} ({d.key.scope}"
            f"{', agent ' + d.key.agent_version if d.key.agent_version else ''}): "
            f"{d.measure.replace('_', ' ')} {d.direction} -> {d.attribution}; "
            f"e-value {e['e_value']:.3g}, baseline {e['baseline_rate']:.3f}, "
            f"since {e['recent_rate']:.3f}; {d.reason}",
            highlight=False,
        )
