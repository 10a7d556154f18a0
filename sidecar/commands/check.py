"""``sidecar check --config FILE [--rubrics DIR]``: what ``run`` would do, without connecting.

Validates the settings (file, secrets directory, environment), the Kafka
TLS material, secret files and token hook, the rubrics, their canary sets and
the judge's credentials, and prints what the service
would do with them: which rubrics, the judge on or off and why, what is
SKIPPED, and every topic it reads or writes. Nothing is contacted: no Kafka,
no judge, no trace backend. Exit 0 when ``run`` would start with these
settings, 2 (one line naming the problem) when it would not.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from sidecar.adapters.kafka_security import security_options
from sidecar.commands._wiring import (
    JudgeState,
    command_rubrics,
    judge_configured,
    judge_credentials_hint,
)
from sidecar.drift.canary_schedule import load_sets
from sidecar.drift.fingerprint import check_fingerprint
from sidecar.evaluate.rubric import Rubric, Scope
from sidecar.settings import Settings, conversation_group, load_settings
from sidecar.topic_plan import for_run, plan


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "check",
        help="validate settings, rubrics, canary sets and credentials without connecting",
    )
    parser.add_argument(
        "--config", type=Path, help="YAML settings file (SIDECAR_* variables override it)"
    )
    parser.add_argument(
        "--rubrics", type=Path, help="rubric directory (default: the rubrics_dir setting)"
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    security_options(settings.kafka)  # loads the TLS material, secret files and token hook
    directory, rubrics = command_rubrics(args.rubrics, settings.rubrics_dir)
    judge_on = judge_configured(settings.judge)
    # Loaded (and so validated) even with the judge off, when run would not read them.
    sets = load_sets(rubrics, directory, time.monotonic(), settings.canary_root)
    source = args.config or "no file"
    print(f"settings: {source} (SIDECAR_* variables and $SIDECAR_SECRETS_DIR applied): valid")
    print(f"rubrics: {len(rubrics)} from {directory}")
    for rubric in rubrics:
        criteria = len(rubric.judge.criteria) if rubric.judge else 0
        print(
            f"  {rubric.id} v{rubric.version} ({rubric.scope.value}): "
            f"{len(rubric.checks)} checks, {criteria} criteria, hash {rubric.content_hash}"
        )
        if (fingerprint := check_fingerprint(rubric)).warning:
            print(f"    warning: {fingerprint.message}")
    print(_judge_line(settings, JudgeState.of(rubrics, judge_on)))
    if sets:
        names = ", ".join(f"{s.rubric.id} ({len(s.cases)} cases)" for s in sets)
        running = "" if judge_on else "; not run while the judge is off"
        print(f"canary sets: {len(sets)} valid: {names}{running}")
    conversations = any(r.scope is Scope.CONVERSATION for r in rubrics)
    for line in _kafka_lines(settings, rubrics, conversations=conversations):
        print(line)
    metrics = settings.metrics
    print(f"metrics: http://{metrics.host}:{metrics.port}/metrics (and /healthz, /readyz)")
    print("run would start with these settings")
    return 0


def _judge_line(settings: Settings, state: JudgeState) -> str:
    match state.reason:
        case "configured":
            return f"judge: on ({settings.judge.backend.value} backend)"
        case "no_judge_criteria":
            return "judge: not needed (no rubric has judge criteria)"
        case _:
            return (
                f"judge: off, {judge_credentials_hint().rstrip('.')}; the judge criteria of "
                f"{', '.join(state.skipped_rubrics)} would be SKIPPED and the alert "
                "SidecarJudgeDisabled would fire"
            )


def _kafka_lines(settings: Settings, rubrics: list[Rubric], *, conversations: bool) -> list[str]:
    kafka = settings.kafka
    lines = [
        f"kafka: {kafka.bootstrap_servers} over {kafka.security_protocol}, "
        f"group {kafka.group_id}"
        + (
            f", conversation group {conversation_group(kafka, settings.conversations)}"
            if conversations and settings.conversations.enabled
            else ""
        ),
        "topics (`sidecar topics create` makes the missing ones):",
    ]
    specs = plan(settings)
    needed = {spec.name for spec in for_run(specs, rubrics)}
    for spec in specs:
        if spec.name in needed:
            use = "used by run"
        elif "run" in spec.used_by:
            use = f"not used now; run uses it with {spec.when}".rstrip()
        else:
            use = f"used by {', '.join(spec.used_by)}"
        lines.append(f"  {spec.name:<28} {spec.field:<30} {use}")
    return lines
