"""``sidecar run --config FILE [--workers N]``: the service (N processes: :mod:`sidecar.adapters.workers`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from sidecar import logs
from sidecar.adapters.http import MetricsServer
from sidecar.adapters.kafka import KafkaLabelSource, KafkaSink, KafkaSource
from sidecar.adapters.kafka_admin import admin, describe
from sidecar.adapters.kafka_security import security_options
from sidecar.adapters.kafka_turns import KafkaConversationState, turn_source
from sidecar.adapters.otel import verdict_spans
from sidecar.adapters.prometheus import Metrics, record_rubrics
from sidecar.adapters.workers import (
    MULTIPROC_ENV,
    StatsBridge,
    Supervisor,
    pass_gate,
    worker_command,
    worker_count,
    worker_index,
)
from sidecar.commands._wiring import JudgeState, build_judge, with_shadow
from sidecar.drift.attribute import drift_settings
from sidecar.drift.canary_schedule import CanarySchedule, load_sets
from sidecar.drift.fingerprint import check_fingerprint
from sidecar.engine.replica import Service
from sidecar.errors import ConfigError, SidecarError, UsageError
from sidecar.evaluate.rubric import Rubric, load_rubrics
from sidecar.settings import Settings, load_settings
from sidecar.telemetry import ConsumerLag
from sidecar.topic_plan import for_run, missing_message, plan, problems


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the evaluator service (Kafka in, verdicts out)")
    parser.add_argument(
        "--config", type=Path, help="YAML settings file (SIDECAR_* env overrides it)"
    )
    logs.add_arguments(parser)
    parser.add_argument(
        "--workers",
        type=int,
        help="service processes in one consumer group, one per core "
        "(default: the workers setting, 1)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    # TLS material, secret files and a token-provider hook that cannot load: one line, now.
    security_options(settings.kafka)
    level, log_format = logs.configure_from(args, settings.log.level, settings.log.format)
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    workers = args.workers if args.workers is not None else settings.workers
    rubrics = load_rubrics(settings.rubrics_dir)
    index = worker_index()
    if index in (None, 0):
        for rubric in rubrics:
            if (fingerprint := check_fingerprint(rubric)).warning:
                logging.getLogger("sidecar").warning("%s", fingerprint.message)
    if workers > 1:
        # Settings and rubrics are valid (checked above), and so are the topics: start the workers.
        if index is None and not asyncio.run(_startup_check(settings, rubrics, args.config)):
            logging.getLogger("sidecar").info("stopped during start-up")
            return 0
        supervisor = Supervisor(settings, worker_command(args.config, level, log_format), workers)
        logging.getLogger("sidecar").info(
            "starting %d workers, metrics on :%d", workers, settings.metrics.port
        )
        return asyncio.run(_supervise(supervisor))
    metrics = Metrics(
        max_agents=settings.metrics.max_agents,
        drift=drift_settings(settings.drift),
        shadow=settings.judge.shadow,
    )
    spans = verdict_spans(
        enabled=settings.otel.enabled,
        service_name=settings.otel.service_name,
        timeout_s=settings.otel.shutdown_timeout_s,
    )
    judge = build_judge(settings.judge, metrics)
    # Under a supervisor only worker 0 runs the canaries, so their spend does not grow with N.
    canary_worker = judge is not None and index in (None, 0)
    sets = (
        load_sets(rubrics, settings.rubrics_dir, time.monotonic(), settings.canary_root)
        if canary_worker
        else []
    )
    canaries = (
        CanarySchedule(sets, judge, metrics, spans=spans) if judge is not None and sets else None
    )
    JudgeState.of(rubrics, judge is not None).report(metrics, logging.getLogger("sidecar"))
    pipeline_judge = with_shadow(judge, settings.judge, metrics, spans)
    if pipeline_judge is not judge:
        shadow = settings.judge.shadow
        logging.getLogger("sidecar").info(
            "shadow judge %s re-judges %.1f%% of the judged cases (verdicts unchanged)",
            shadow.model,
            100 * shadow.share,
        )
    service, server = kafka_service(settings, rubrics, metrics, spans, pipeline_judge)
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
    if index is not None and not pass_gate(index):
        logging.getLogger("sidecar").warning(
            "worker %d: the other workers were not loaded in time; starting anyway", index
        )
    # A worker's statistics reach the supervisor through files (sidecar.adapters.workers).
    multiproc = os.environ.get(MULTIPROC_ENV)
    exemplar_dir = Path(multiproc) if multiproc else None
    bridge = StatsBridge(metrics, exemplar_dir=exemplar_dir) if index is not None else None
    started = time.monotonic()
    # A worker's supervisor checked the topics already.
    check = (settings, rubrics, args.config) if index is None else None
    asyncio.run(
        _run(service, server, canaries, bridge, orphan_watch=index is not None, check=check)
    )
    spans.shutdown()
    logging.getLogger("sidecar").info("stopped cleanly after %.0fs", time.monotonic() - started)
    return 0


async def _topics_ready(settings: Settings, rubrics: list[Rubric], config: Path | None) -> None:
    """Every topic `run` uses exists and co-partitioned ones agree, else one ConfigError line.

    Only the topics this run uses: not the backfill's, and the conversation topics only
    when some loaded rubric has ``scope: conversation``.
    """
    specs = for_run(plan(settings), rubrics)
    async with admin(settings.kafka) as client:
        found = await describe(client, settings.kafka, [s.name for s in specs])
    if any(state.error == "missing" for state in found.values()):
        raise ConfigError(missing_message(specs, found, str(config or "FILE")))
    log = logging.getLogger("sidecar")
    for problem in problems(specs, found):
        if problem.startswith("co-partitioned"):
            raise ConfigError(f"{problem} (`sidecar topics check --config {config or 'FILE'}`)")
        # Not authorised to describe: the clients say more once they use the topic.
        log.warning("%s", problem)


async def _startup_check(
    settings: Settings,
    rubrics: list[Rubric],
    config: Path | None,
    stop: asyncio.Event | None = None,
) -> bool:
    """Run the topic check; False when SIGTERM or SIGINT came first (nothing started)."""
    stop = stop or _stop_on_signals()
    check = asyncio.create_task(_topics_ready(settings, rubrics, config))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({check, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if check.done():
        check.result()
        return True
    check.cancel()
    with contextlib.suppress(asyncio.CancelledError, SidecarError):
        await check
    return False


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (call on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _supervise(supervisor: Supervisor) -> int:
    return await supervisor.run(_stop_on_signals())


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    """A worker whose supervisor died (even by SIGKILL) shuts down instead of running on."""
    while not stop.is_set():
        if os.getppid() != parent:
            logging.getLogger("sidecar").error("the supervisor exited; this worker stops")
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


def kafka_service(
    settings: Settings,
    rubrics: list[Rubric],
    metrics: Metrics,
    spans: Any,
    judge: Any,
    **seams: Any,
) -> tuple[Service, MetricsServer]:
    """The service on Kafka, with its metrics and probes server (``seams``: Service's)."""
    kafka, c = settings.kafka, settings.conversations
    sources: list[KafkaSource] = []

    def source() -> KafkaSource:
        sources.append(KafkaSource(kafka, members=worker_count()))
        return sources[-1]

    def lag() -> ConsumerLag:
        return sources[-1].lag() if sources else ConsumerLag({})

    service = Service(
        settings,
        rubrics,
        telemetry=metrics,
        spans=spans,
        judge=judge,
        source=source,
        sink=lambda: KafkaSink(kafka),
        labels=lambda: KafkaLabelSource(kafka, settings.review.labels_topic),
        turn_source=lambda: turn_source(kafka, c),
        state=lambda: KafkaConversationState(kafka, c),
        **seams,
    )
    metrics.watch(lag)
    record_rubrics(metrics, rubrics)
    server = MetricsServer.of(settings.metrics, metrics.registry, service.readiness)
    return service, server


async def _run(
    service: Service,
    server: MetricsServer,
    canaries: CanarySchedule | None,
    bridge: StatsBridge | None = None,
    *,
    orphan_watch: bool = False,
    check: tuple[Settings, list[Rubric], Path | None] | None = None,
) -> None:
    stop = _stop_on_signals()
    await server.start()
    try:
        checked = check is None or await _startup_check(*check, stop)
    except BaseException:
        await server.stop()
        raise
    if not checked:
        logging.getLogger("sidecar").info("stopped during start-up")
        await server.stop()
        return
    bridging = asyncio.create_task(bridge.run(stop)) if bridge is not None else None
    watch = asyncio.create_task(_watch_parent(os.getppid(), stop)) if orphan_watch else None
    # A plain task, not a TaskGroup: the service's own errors must reach the CLI unwrapped.
    canary_task = asyncio.create_task(canaries.run(stop)) if canaries is not None else None
    running = asyncio.create_task(service.run(stop))
    try:
        # Until the service is ready, a signal cancels its start (which may wait on Kafka).
        while not running.done():
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({running, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if stop.is_set() and not running.done() and not service.started:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
                break
            if stop.is_set():
                await running
        if not running.cancelled():
            running.result()
    finally:
        stop.set()  # the service ended (or failed): the canaries end with it
        if canary_task is not None:
            await canary_task
        if watch is not None:
            await watch
        if bridging is not None:
            await bridging
        await server.stop()
