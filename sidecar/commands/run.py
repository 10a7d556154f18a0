"""``sidecar run --config FILE``: the service."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import Any

from sidecar.adapters.metrics import Metrics
from sidecar.adapters.otel import verdict_spans
from sidecar.app import Service
from sidecar.canary_schedule import CanarySchedule, load_sets
from sidecar.fingerprint import check_fingerprint
from sidecar.rubric import load_rubrics
from sidecar.settings import load_settings
from sidecar.wiring import build_judge


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the evaluator service (Kafka in, verdicts out)")
    parser.add_argument(
        "--config", type=Path, help="YAML settings file (SIDECAR_* env overrides it)"
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = load_settings(args.config)
    rubrics = load_rubrics(settings.rubrics_dir)
    for rubric in rubrics:
        if (fingerprint := check_fingerprint(rubric)).warning:
            logging.getLogger("sidecar").warning("%s", fingerprint.message)
    metrics = Metrics(max_agents=settings.metrics.max_agents)
    spans = verdict_spans(
        enabled=settings.otel.enabled,
        service_name=settings.otel.service_name,
        timeout_s=settings.otel.shutdown_timeout_s,
    )
    judge = build_judge(settings.judge, metrics)
    sets = load_sets(rubrics, settings.rubrics_dir, time.monotonic()) if judge is not None else []
    canaries = CanarySchedule(sets, judge, metrics) if judge is not None and sets else None
    service = Service(settings, rubrics, metrics=metrics, spans=spans, judge=judge)
    logging.getLogger("sidecar").info(
        "starting: %d rubrics from %s, topic %s on %s, metrics on :%d, judge %s, %d canary sets",
        len(rubrics),
        settings.rubrics_dir,
        settings.kafka.topic,
        settings.kafka.bootstrap_servers,
        settings.metrics.port,
        "on" if judge is not None else "off (no credentials)",
        len(sets),
    )
    asyncio.run(_run(service, canaries))
    spans.shutdown()
    return 0


async def _run(service: Service, canaries: CanarySchedule | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A plain task, not a TaskGroup: the service's own errors must reach the CLI unwrapped.
    canary_task = asyncio.create_task(canaries.run(stop)) if canaries is not None else None
    try:
        await service.run(stop)
    finally:
        stop.set()  # the service ended (or failed): the canaries end with it
        if canary_task is not None:
            await canary_task
