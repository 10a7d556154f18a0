"""``sidecar topics plan|create|check --config FILE``: the Kafka topics a configuration uses.

``plan`` prints every topic the configuration may use (inputs, outputs, dead letters,
review and labels, turns and the compacted conversation state, backfill) with the
setting naming it, the partitions, the replication, the configs it needs, its
co-partition group and the commands that use it (``run``, ``backfill``; the
conversation topics only with a ``scope: conversation`` rubric); it does not connect
to Kafka. ``create`` creates the missing ones through the admin API
with the same security settings as the service, leaving existing ones alone (run it
again: nothing changes); a topic missing from a co-partition group whose partner
exists gets the partner's partition count. ``check`` verifies that every topic
exists and co-partitioned topics agree: exit 0, or 1 with every problem named.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from sidecar.adapters.kafka_admin import admin, create, describe
from sidecar.errors import UsageError
from sidecar.settings import Settings, load_settings
from sidecar.topic_plan import DEFAULT_PARTITIONS, DEFAULT_REPLICATION, TopicSpec, plan, problems


def register(sub: Any) -> None:
    parser = sub.add_parser("topics", help="plan, create or check the Kafka topics in use")
    actions = parser.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    for name, text, handler in (
        ("plan", "print every topic this configuration uses (no Kafka needed)", handle_plan),
        ("create", "create the missing topics (idempotent)", handle_create),
        ("check", "verify every topic exists and co-partitioned ones agree", handle_check),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument(
            "--config", type=Path, help="YAML settings file (SIDECAR_* env overrides it)"
        )
        if name != "check":
            action.add_argument(
                "--partitions",
                type=int,
                default=DEFAULT_PARTITIONS,
                help=f"partitions of each new topic (default {DEFAULT_PARTITIONS})",
            )
            action.add_argument(
                "--replication-factor",
                type=int,
                default=None,
                help=f"replicas of each new topic (default {DEFAULT_REPLICATION}, "
                "or the number of brokers when fewer)",
            )
        action.set_defaults(handler=handler)


def _specs(args: argparse.Namespace, settings: Settings) -> list[TopicSpec]:
    partitions: int = getattr(args, "partitions", DEFAULT_PARTITIONS)
    replication: int | None = getattr(args, "replication_factor", None)
    if partitions < 1:
        raise UsageError(f"--partitions must be at least 1, got {partitions}")
    if replication is not None and replication < 1:
        raise UsageError(f"--replication-factor must be at least 1, got {replication}")
    return plan(settings, partitions, replication)


def _configs(spec: TopicSpec) -> str:
    return ",".join(f"{k}={v}" for k, v in spec.configs.items()) or "-"


def handle_plan(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    specs = _specs(args, settings)
    rows = [
        (
            "TOPIC",
            "SETTING",
            "PARTITIONS",
            "REPLICATION",
            "CONFIGS",
            "CO-PARTITIONED",
            "USED BY",
            "ROLE",
        )
    ]
    for s in specs:
        replication = str(s.replication) if s.replication else f"{DEFAULT_REPLICATION}*"
        rows.append(
            (
                s.name,
                s.field,
                str(s.partitions),
                replication,
                _configs(s),
                s.group or "-",
                s.used_by_text(),
                s.role,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        )
    if any(s.replication is None for s in specs):
        print(f"* {DEFAULT_REPLICATION}, or the number of brokers when the cluster has fewer")
    print(
        "co-partitioned topics must have equal partition counts; "
        "`sidecar topics create` creates the missing ones"
    )
    return 0


def handle_create(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    specs = _specs(args, settings)

    async def go() -> int:
        async with admin(settings.kafka) as client:
            results = await create(client, settings.kafka, specs)
        failed = 0
        for r in results:
            detail = f"{r.partitions} partitions, replication {r.replication}"
            if r.spec.configs:
                detail += f", {_configs(r.spec)}"
            if r.outcome == "created":
                print(f"created {r.spec.name} ({r.spec.field}): {detail}")
            elif r.outcome == "exists":
                print(f"exists  {r.spec.name} ({r.spec.field})")
            else:
                failed += 1
                print(f"failed  {r.spec.name} ({r.spec.field}): {r.outcome}", file=sys.stderr)
        return 1 if failed else 0

    return asyncio.run(go())


def handle_check(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    specs = plan(settings)

    async def go() -> int:
        async with admin(settings.kafka) as client:
            found = await describe(client, settings.kafka, [s.name for s in specs])
        found_problems = problems(specs, found)
        for problem in found_problems:
            print(f"sidecar topics check: {problem}", file=sys.stderr)
        if found_problems:
            config = args.config or "FILE"
            print(
                f"sidecar topics check: `sidecar topics create --config {config}` creates "
                "missing topics",
                file=sys.stderr,
            )
            return 1
        print(f"ok: {len(specs)} topics exist; co-partitioned topics agree")
        return 0

    return asyncio.run(go())
