"""``sidecar run --workers N``: N service processes in one consumer group, one metrics endpoint.

The service is CPU-bound Python, so one process uses one core. With
``--workers N`` the command becomes a small supervisor:

- it starts N worker processes, each a whole ``sidecar run`` (the same config)
  in the same consumer group, so Kafka spreads the partitions over them; only
  worker 0 runs the canary schedule, so canary judge spend does not grow with N;
- the workers write their metrics with prometheus-client's multiprocess mode
  into a private directory; the supervisor serves them, summed, on the
  configured metrics port. Counters and histograms are exact sums over the
  workers (also over workers that exited); each gauge declares how workers
  combine (``multiprocess_mode``: queue depth, open traces and lag add up,
  flags take the maximum). Each worker's own endpoint is on a free loopback
  port, for debugging only;
- ``/healthz`` is 200 while every worker process is alive; ``/readyz`` is 200
  when all N workers report ready (``sidecar_ready`` summed) and none fails
  to deliver (``sidecar_delivery_failing``);
- a worker that exits unexpectedly is started again after a back-off (1 s
  doubling to 30 s), counted in ``sidecar_worker_restarts_total``; its
  partitions go to the others meanwhile, and its uncommitted records are read
  again (at-least-once, as for any replica);
- the workers join the group together: each, once loaded (imports,
  settings, rubrics), says so in a start gate (``SIDECAR_WORKER_GATE``, a
  directory) and waits until the supervisor opens it, which it does when all
  N are loaded (at most ``GATE_TIMEOUT_S`` after they started). One
  rebalance at start instead of one per worker, so the first worker does not
  take every partition, read records and then hand half of them over
  (re-read by the next owner). A worker started again later finds the gate open.
  The group lets the others in only at its next heartbeat, so each worker
  also waits to read until it holds no more than its share of the partitions
  (:func:`fair_share`, called by ``KafkaSource.start`` with ``members=N``;
  at most ``kafka.fair_share_wait_s``);
- SIGTERM or SIGINT is passed to every worker, which shuts down as one
  replica does; workers still running after ``shutdown_timeout_s`` + 15 s are
  killed. The exit code is 0 when every worker exited 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from sidecar.adapters.exemplars import ExemplarMemory, MergedExemplars
from sidecar.adapters.http import MetricsServer
from sidecar.adapters.prometheus import STAT_FAMILIES, Metrics, retire
from sidecar.retry import Backoff
from sidecar.settings import Settings

log = logging.getLogger(__name__)

# Set in a worker's environment: its index (0 runs the canaries).
WORKER_INDEX_ENV = "SIDECAR_WORKER_INDEX"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Set in a worker's environment: the start gate's directory (see the module docstring).
GATE_ENV = "SIDECAR_WORKER_GATE"
# Set in a worker's environment: how many workers the supervisor runs.
COUNT_ENV = "SIDECAR_WORKER_COUNT"
GATE_TIMEOUT_S = 30.0
_GATE_POLL_S = 0.02
KILL_GRACE_S = 15.0
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0


async def fair_share(
    *,
    assigned: Callable[[], set[int]],
    partition_count: Callable[[], int | None],
    assignments: Callable[[], int],
    members: int,
    timeout_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
) -> bool:
    """With ``members`` started together, wait until this one's share of partitions is fair.

    The first member to join gets every partition until the others are let
    in, which the group does only at its next heartbeat (seconds, on a broker
    without ``group.initial.rebalance.delay.ms``). Reading meanwhile would
    evaluate traces whose partitions move on at once, and their new owners
    read them again. So a member holding more than ``ceil(P / N)`` of the P
    partitions waits (fetching nothing) for the rebalance, at most
    ``timeout_s``. True when the share became fair, False when it timed out.
    """
    if members <= 1:
        return True
    deadline = clock() + timeout_s
    while clock() < deadline:
        total = partition_count()
        if assignments() and total and len(assigned()) <= -(-total // members):
            return True
        await sleep(0.05)
    log.info(
        "the group did not spread its partitions over %d members within %.0fs; "
        "reading partitions %s",
        members,
        timeout_s,
        sorted(assigned()),
    )
    return False


def worker_index(environ: dict[str, str] | os._Environ[str] = os.environ) -> int | None:
    """This process's worker index, or None when it is not a supervised worker."""
    value = environ.get(WORKER_INDEX_ENV)
    return int(value) if value is not None and value.isdigit() else None


def worker_count(environ: dict[str, str] | os._Environ[str] = os.environ) -> int:
    """How many workers share this worker's group (1 when not supervised)."""
    value = environ.get(COUNT_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def pass_gate(
    index: int,
    environ: dict[str, str] | os._Environ[str] = os.environ,
    *,
    timeout_s: float = GATE_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """A worker: say it is loaded, then wait until the gate opens; False if it timed out.

    Without a gate in ``environ`` (not supervised, or an older supervisor) it
    returns True at once.
    """
    gate = environ.get(GATE_ENV)
    if not gate:
        return True
    directory = Path(gate)
    (directory / f"loaded-{index}").touch()
    deadline = clock() + timeout_s
    while not (directory / "open").exists():
        if clock() >= deadline:
            return False
        sleep(_GATE_POLL_S)
    return True


@dataclass
class _Worker:
    index: int
    proc: asyncio.subprocess.Process | None = None
    exit_codes: list[int] = field(default_factory=list)


class Supervisor:
    """Runs ``workers`` copies of ``command`` and serves their metrics as one."""

    def __init__(
        self,
        settings: Settings,
        command: Sequence[str],
        workers: int,
        *,
        metrics_dir: Path | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        self.settings = settings
        self.command = list(command)
        self.workers = [_Worker(i) for i in range(workers)]
        self._own_dir = metrics_dir is None
        self.metrics_dir = metrics_dir or Path(tempfile.mkdtemp(prefix="sidecar-metrics-"))
        self.registry = CollectorRegistry()
        summed = MultiProcessCollector(None, path=str(self.metrics_dir))  # type: ignore[no-untyped-call]
        self.registry.register(MergedExemplars(summed, self.metrics_dir))
        self.restarts = Counter(
            "sidecar_worker_restarts_total",
            "Worker processes started again after they exited unexpectedly.",
            registry=self.registry,
        )
        self.workers_alive = Gauge(
            "sidecar_workers_alive", "Worker processes running.", registry=self.registry
        )
        self.server = MetricsServer.of(settings.metrics, self.registry, self._readiness)
        self._stopping = asyncio.Event()
        self.gate = self.metrics_dir / "gate"
        shutil.rmtree(self.gate, ignore_errors=True)  # an earlier run's, in a given directory
        self.gate.mkdir()

    # -- processes -------------------------------------------------------------------

    def _env(self, index: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                WORKER_INDEX_ENV: str(index),
                GATE_ENV: str(self.gate),
                COUNT_ENV: str(len(self.workers)),
                MULTIPROC_ENV: str(self.metrics_dir),
                # Each worker's own endpoint: loopback, a free port (debugging only).
                "SIDECAR_METRICS__HOST": "127.0.0.1",
                "SIDECAR_METRICS__PORT": "0",
            }
        )
        return env

    async def _spawn(self, worker: _Worker) -> None:
        worker.proc = await asyncio.create_subprocess_exec(
            *self.command, env=self._env(worker.index), stdin=asyncio.subprocess.DEVNULL
        )
        self.workers_alive.set(self._alive())
        log.info("worker %d started (pid %d)", worker.index, worker.proc.pid)

    async def _keep(self, worker: _Worker) -> None:
        """Run one worker; start it again after a back-off when it exits unexpectedly."""
        backoff = Backoff(BACKOFF_BASE_S, BACKOFF_MAX_S, jitter=0.0)
        async for attempt in backoff.attempts(self._pause):
            if self._stopping.is_set():
                return
            await self._spawn(worker)
            assert worker.proc is not None
            code = await worker.proc.wait()
            self.workers_alive.set(self._alive())
            mark_process_dead(worker.proc.pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
            worker.exit_codes.append(code)
            if self._stopping.is_set():
                return
            log.error(
                "worker %d (pid %d) exited with %d; starting it again in %.0fs",
                worker.index,
                worker.proc.pid,
                code,
                backoff.delay(attempt),
            )
            self.restarts.inc()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when the supervisor is told to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _open_gate(self, timeout_s: float = GATE_TIMEOUT_S) -> None:
        """Open the start gate once every worker is loaded, or after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        wanted = {f"loaded-{w.index}" for w in self.workers}
        while loop.time() < deadline:
            if wanted <= {p.name for p in self.gate.iterdir()}:
                break
            await asyncio.sleep(_GATE_POLL_S)
        else:
            log.warning(
                "not every worker loaded within %.0fs; letting the loaded ones start", timeout_s
            )
        (self.gate / "open").touch()

    def _alive(self) -> int:
        return sum(1 for w in self.workers if w.proc is not None and w.proc.returncode is None)

    # -- probes ----------------------------------------------------------------------

    def _summed(self, *names: str) -> dict[str, float]:
        """Each family's samples summed over the workers, from one read of their files."""
        wanted = set(names)
        return {
            family.name: sum(sample.value for sample in family.samples)
            for family in self.registry.collect()
            if family.name in wanted
        }

    def _readiness(self) -> tuple[bool, str]:
        total, alive = len(self.workers), self._alive()
        if alive < total:
            return False, f"not ready: {alive} of {total} workers running"
        sums = self._summed("sidecar_ready", "sidecar_delivery_failing")
        ready = int(sums.get("sidecar_ready", 0))
        if ready < total:
            return False, f"not ready: {ready} of {total} workers ready"
        if sums.get("sidecar_delivery_failing", 0) > 0:
            return False, "not ready: a worker's records are not acknowledged by Kafka"
        return True, f"ready: {total} workers"

    # -- lifecycle -------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until ``stop`` is set, then stop the workers; 0 when all exited 0."""
        await self.server.start()
        keepers = [asyncio.create_task(self._keep(w)) for w in self.workers]
        opener = asyncio.create_task(self._open_gate())
        try:
            await stop.wait()
        finally:
            opener.cancel()
            self._stopping.set()
            await self._terminate(keepers)
            await self.server.stop()
            if self._own_dir:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)
        last = [w.exit_codes[-1] if w.exit_codes else 0 for w in self.workers]
        return 0 if all(code == 0 for code in last) else 1

    async def _terminate(self, keepers: list[asyncio.Task[None]]) -> None:
        for worker in self.workers:
            if worker.proc is not None and worker.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(signal.SIGTERM)
        grace = self.settings.shutdown_timeout_s + KILL_GRACE_S
        _, pending = await asyncio.wait(keepers, timeout=grace)
        for worker in self.workers:
            if worker.proc is not None and worker.proc.returncode is None:
                log.error("worker %d did not stop in %.0fs; killing it", worker.index, grace)
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
        if pending:
            await asyncio.wait(pending, timeout=5)
        for task in pending:
            task.cancel()


def worker_command(config: Path | None, log_level: str, log_format: str = "text") -> list[str]:
    """The command line of one worker: ``sidecar run`` with the same config, one process.

    ``-P``: the worker inherits the supervisor's working directory, and plain
    ``python -m`` would put that directory first on ``sys.path``, so a folder
    named ``sidecar`` there (a user's own) would be imported instead of the
    installed package. With ``-P`` the interpreter leaves the directory out.
    """
    command = [sys.executable, "-P", "-m", "sidecar", "run", "--workers", "1"]
    command += ["--log-level", log_level]
    command += ["--log-format", log_format]
    if config is not None:
        command += ["--config", str(config)]
    return command


class StatsBridge:
    """A worker's scrape-time statistics written where the supervisor can sum them.

    prometheus-client's multiprocess mode reads only what metric objects
    wrote to its files, never a worker's custom collector, so in a worker the
    families of :data:`~sidecar.adapters.prometheus.STAT_FAMILIES` are copied
    into metric objects of their own (counters by their increase, gauges set,
    with the family's declared mode) every ``interval_s`` and once more at
    the end. Series that disappear (a revoked partition's lag) are retired.

    With ``exemplar_dir`` (the multiprocess directory) the verdict series'
    latest exemplars are written there too, for the supervisor to merge.
    """

    def __init__(
        self, metrics: Metrics, interval_s: float = 1.0, exemplar_dir: Path | None = None
    ) -> None:
        self._metrics = metrics
        self.interval_s = interval_s
        self._exemplar_dir = exemplar_dir
        if exemplar_dir is not None:
            metrics.exemplar_memory = ExemplarMemory()
        # A registry of its own: the names are already the worker's own collector's.
        registry = CollectorRegistry()
        self._families: dict[str, Counter | Gauge] = {}
        for family in STAT_FAMILIES:
            if family.kind == "counter":
                self._families[family.name] = Counter(
                    family.name, family.documentation, family.labels, registry=registry
                )
            else:
                self._families[family.name] = Gauge(
                    family.name,
                    family.documentation,
                    family.labels,
                    multiprocess_mode=family.mode,  # type: ignore[arg-type]
                    registry=registry,
                )
        self._written: dict[str, dict[tuple[str, ...], float]] = {}

    def sync(self) -> None:
        self._metrics.refresh_drift()  # the supervisor's scrape reads this worker's files
        samples = self._metrics.stat_samples()
        for family in STAT_FAMILIES:
            metric = self._families[family.name]
            now = samples.get(family.name, {})
            before = self._written.get(family.name, {})
            for labels, value in now.items():
                child = metric.labels(*labels) if labels else metric
                if isinstance(metric, Counter):
                    child.inc(max(0.0, value - before.get(labels, 0.0)))
                else:
                    child.set(value)  # type: ignore[union-attr]
            if isinstance(metric, Gauge):
                for gone in set(before) - set(now):
                    if gone:
                        retire(metric, *gone, last=0.0 if family.mode == "livesum" else math.nan)
            self._written[family.name] = dict(now)
        memory = self._metrics.exemplar_memory
        # Written when an exemplar came since the last write (up to 10,000 series each time).
        if self._exemplar_dir is not None and memory is not None and memory.changed:
            try:
                memory.write(self._exemplar_dir)
            except OSError as exc:
                log.warning("exemplars could not be written to %s: %s", self._exemplar_dir, exc)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                self.sync()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        finally:
            self.sync()
