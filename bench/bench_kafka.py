"""Kafka-path throughput, side by side, in one run on one topic of the real broker.

Produces ``--traces`` refund-agent traces (OTel GenAI conventions, six spans
each, one OTLP protobuf record per trace keyed by its hex trace id, as the
Collector's kafka exporter with ``partition_traces_by_id`` writes them) to a
fresh topic, then lets each reader consume the same topic in its own consumer
group, ``--repeats`` times, the readers in alternating order (forward, then
backward) so that the drift of a shared machine spreads over all of them:

- ``bare``: a bare aiokafka consumer in this process (no decoding): the
  client's limit;
- ``raw``: the OpenTelemetry Collector's kafkareceiver decoding to pdata, into
  the debug exporter;
- ``groupbytrace``: the same with the ``groupbytrace`` processor (each trace
  held 1 s, then released whole);
- ``tail_sampling``: the same with the ``tail_sampling`` processor, its
  policies the refund rubric written in OTTL (``bench/refund_policies.py``);
- ``sidecar``: ``sidecar run`` (judge off) with the rubric's four checks, once
  per ``--workers`` count, from the first span read to the last verdict.

The Collector readers need the benchmark's Collector build
(``scripts/build-collector bench/collector/builder-config.yaml``).

For each reader: spans/s of wall time, and spans per CPU second of the
reader's own processes (utime + stime from /proc of the process and its
descendants, the workers; this process's own for ``bare``) over the same
window. Each rate is spans / (time of its last span, decision or verdict -
time of its first span read); the Collectors and the sidecar are timed from
their own metrics endpoints, polled every 100 ms (the kafkareceiver alone every 20 ms).
The table gives medians over the repeats, and the ratios the sidecar to
tail_sampling and two workers to one, per core and per wall second.

Every sidecar run writes to its own verdict topic, which is read back after
the run: every trace must have its verdict record, and the distinct records
must be byte for byte those a replay of the same records and rubric gives,
apart from ``decided_at`` (the service's clock) (at-least-once redeliveries
are counted), and once the run stopped its group's committed offsets must be
the topic's end offsets; any difference ends the benchmark with exit 1. The
summary's ``verdicts=replay`` says both held. The traces tail_sampling kept
are counted against those the replay fails, plus the error and slow ones.

    .venv/bin/python bench/bench_kafka.py [--traces 10000] [--repeats 3] [--partitions 3]
        [--bootstrap HOST:PORT] [--otelcol PATH] [--skip bare,raw,groupbytrace,tail_sampling,sidecar]
        [--workers 1,2]          # sidecar run once per worker count (sidecar run --workers N)
        [--profile stacks.txt]   # first repeat's sidecar runs sampled by py-spy (collapsed stacks)

``--skip collector`` skips the three Collector readers. Without ``--bootstrap``
(or ``SIDECAR_TEST_KAFKA``) a broker is started with ``scripts/kafka/broker.py``
and stopped afterwards. The last line is one summary that CI logs can keep.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402

from bench.bench_replay import replay_verdicts  # noqa: E402
from bench.refund_policies import (  # noqa: E402
    COLLECTOR_READERS,
    DECISION_WAIT,
    RUBRIC,
    collector_config,
)
from bench.verdict_digest import without  # noqa: E402
from sidecar.evaluate.rubric import load_rubrics  # noqa: E402
from sidecar.model import Outcome  # noqa: E402
from sidecar.wire.verdicts import verdict_json  # noqa: E402
from tests.agents.genai_spans import GenAICase, make_cases  # noqa: E402
from tests.agents.otlp import encode_request  # noqa: E402
from tests.integration.harness import (  # noqa: E402
    committed_offsets,
    create_topics,
    end_offsets,
)

CACHE = Path(os.environ.get("SIDECAR_CACHE", Path.home() / ".cache" / "sidecar"))
# How often each timed reader's /metrics is polled. Each scrape costs the reader
# CPU (at 20 ms it was 5 % of the sidecar's profile), and the interval bounds the
# timing's resolution: 0.1 s on the sidecar's runs of 10 s and more is 1 %. The
# Collector's kafkareceiver alone reads 10,000 traces in about a second, so that
# reader is polled every 20 ms; groupbytrace and tail_sampling hold every trace
# a second or more, so they are polled as the sidecar is.
POLL_S = 0.1
RAW_POLL_S = 0.02
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Load:
    records: list[tuple[bytes, bytes]]
    spans: int
    traces: int
    payload_bytes: int
    # Traces with an ERROR span or longer than 30 s (tail_sampling keeps them too).
    error_or_slow: frozenset[str]


@dataclass(frozen=True, slots=True)
class Result:
    reader: str
    seconds: float
    spans: int
    # CPU seconds (user + system) of the reader's processes over the same window.
    cpu_s: float
    rss_mb: float | None = None
    # Named moments of the run, seconds after its first span (tail_sampling: "ingested").
    marks: dict[str, float] = field(default_factory=dict)
    # Counts read off the reader's metrics at the end (tail_sampling: "kept").
    counts: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.spans / self.seconds if self.seconds > 0 else float("inf")

    @property
    def per_cpu(self) -> float:
        # NaN when the window was shorter than the clock's tick (tiny loads): printed as nan.
        return self.spans / self.cpu_s if self.cpu_s > 0 else float("nan")


def refund_cases(traces: int) -> list[GenAICase]:
    """The first ``traces`` refund-agent traces of the generator (its seed 7 sequence)."""
    made = int(traces / 0.55) + 20
    while True:
        refunds = [c for c in make_cases(made, seed=7) if c.kind.startswith("refund")]
        if len(refunds) >= traces:
            return refunds[:traces]
        made *= 2


def make_load(traces: int) -> Load:
    cases = refund_cases(traces)
    records = [(c.trace_id.encode(), encode_request(c.spans)) for c in cases]
    spans = sum(len(c.spans) for c in cases)
    marked = frozenset(c.trace_id for c in cases if "+error" in c.kind or "+slow" in c.kind)
    return Load(records, spans, len(cases), sum(len(v) for _, v in records), marked)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def produce(bootstrap: str, topic: str, partitions: int, load: Load) -> None:
    await create_topics(bootstrap, [topic], partitions=partitions)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_request_size=8 * 1024 * 1024
    )
    await producer.start()
    try:
        batch = [await producer.send(topic, value, key=key) for key, value in load.records]
        await asyncio.gather(*batch)
    finally:
        await producer.stop()


async def bare_consumer(bootstrap: str, topic: str, load: Load) -> Result:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"bench-bare-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        seen = 0
        first: float | None = None
        cpu_at_first = 0.0
        while seen < len(load.records):
            # The clock starts at the fetch that brought the first records, so
            # that fetch counts too (the others are timed from their first span).
            asked = time.perf_counter()
            cpu_asked = time.process_time()
            batches = await consumer.getmany(timeout_ms=100, max_records=5000)
            got = sum(len(records) for records in batches.values())
            if got and first is None:
                first, cpu_at_first = asked, cpu_asked
            seen += got
        assert first is not None
        seconds = time.perf_counter() - first
        cpu = time.process_time() - cpu_at_first
        return Result("bare aiokafka consumer", seconds, load.spans, cpu)
    finally:
        await consumer.stop()


# The key the service fills from its clock (``sidecar.wire.verdicts``), left out of the comparison.
CLOCKED = ("decided_at",)


@dataclass(frozen=True, slots=True)
class Expected:
    """What a replay of the load under the rubric gives."""

    lines: list[str]  # its verdict records, as sorted JSON lines without CLOCKED
    failed: frozenset[str]  # traces with a failed check


def expected_verdicts(load: Load, rubric_dir: Path) -> Expected:
    verdicts = replay_verdicts([record for _, record in load.records], load_rubrics(rubric_dir))
    failed = frozenset(
        v.trace_id for v in verdicts if any(c.outcome is Outcome.FAIL for c in v.checks)
    )
    return Expected(sorted(without(verdict_json(v), CLOCKED) for v in verdicts), failed)


async def read_verdicts(bootstrap: str, topic: str, expect: int) -> list[str]:
    """Every record of ``topic`` (until ``expect`` distinct ones, or 30 s without news)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    lines: list[str] = []
    try:
        quiet_since = time.monotonic()
        while len(set(lines)) < expect and time.monotonic() - quiet_since < 30:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            for messages in batches.values():
                lines.extend(m.value.decode() for m in messages)
                quiet_since = time.monotonic()
    finally:
        await consumer.stop()
    return lines


def check_verdicts(got: list[str], expected: list[str], what: str) -> str:
    """Every trace's verdict, each the replay's record byte for byte; else exit 1."""
    distinct = sorted({without(line, CLOCKED) for line in got})
    digest = hashlib.sha256("".join(line + "\n" for line in distinct).encode()).hexdigest()
    if distinct != expected:
        missing = len(set(expected) - set(distinct))
        extra = len(set(distinct) - set(expected))
        sys.exit(
            f"{what}: verdict records differ from the replay's: {missing} missing, {extra} "
            f"unexpected (of {len(expected)})"
        )
    return (
        f"{what}: {len(got)} verdict records, {len(distinct)} distinct = the replay's "
        f"(sha256 {digest[:16]}), {len(got) - len(distinct)} redelivered"
    )


async def check_offsets(bootstrap: str, topic: str, group: str, log: Path) -> str:
    """After a graceful stop the group has committed every record of the topic; else exit 1."""
    committed = await committed_offsets(bootstrap, group, topic)
    ends = await end_offsets(bootstrap, topic)
    if committed != ends:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])  # noqa: ASYNC240
        sys.exit(
            f"{group}: committed offsets {dict(sorted(committed.items()))}, but the topic ends "
            f"at {dict(sorted(ends.items()))}; the end of the sidecar's log:\n{tail}"
        )
    return f"{group}: committed offsets = the topic's end offsets {dict(sorted(ends.items()))}"


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def metric_sum(text: str, name: str, where: str = "") -> float:
    """The sum of ``name``'s samples (and of ``name_total``'s) whose line contains ``where``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or where not in line:
            continue
        rest = line[len(name) :]
        if rest.startswith("_total"):
            rest = rest[len("_total") :]
        if rest[:1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass(slots=True)
class Timing:
    seconds: float
    cpu_s: float
    marks: dict[str, float]
    last: str  # the last scrape


def timed_by_metrics(
    proc: subprocess.Popen[bytes],
    log: Path,
    url: str,
    started: Callable[[str], bool],
    done: Callable[[str], bool],
    what: str,
    timeout_s: float = 600.0,
    poll_s: float = POLL_S,
    marks: dict[str, Callable[[str], bool]] | None = None,
) -> Timing:
    """From the first poll where ``started`` holds to the first where ``done`` does.

    Also the CPU seconds ``proc`` and its descendants used between those two
    polls, and the time after the start of the first poll where each of
    ``marks`` held.
    """
    deadline = time.monotonic() + timeout_s
    first: float | None = None
    cpu_at_first = 0.0
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{what} exited with {proc.returncode} before it finished:\n{tail}")
        text = scrape(url)
        now = time.perf_counter()
        if first is None and text and started(text):
            first = now
            cpu_at_first = tree_cpu_s(proc.pid)
        if first is not None:
            for name, holds in (marks or {}).items():
                if name not in seen and holds(text):
                    seen[name] = now - first
            if done(text):
                return Timing(now - first, tree_cpu_s(proc.pid) - cpu_at_first, seen, text)
        time.sleep(poll_s)
    raise RuntimeError(f"{what} did not finish within {timeout_s:.0f} s")


def peak_rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) / 1024 if found else None


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def collector(
    binary: Path, bootstrap: str, topic: str, load: Load, work: Path, kind: str, run: str
) -> Result:
    """One Collector reader (``raw``, ``groupbytrace`` or ``tail_sampling``) over the topic."""
    port = free_port()
    work = work / f"otelcol-{kind}-{run}"
    work.mkdir()
    config = work / "otelcol.yaml"
    group = f"bench-otelcol-{kind}-{uuid.uuid4().hex[:8]}"
    config.write_text(collector_config(kind, bootstrap, topic, group, port, load.traces))
    log_path = work / "otelcol.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [str(binary), "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
    )

    def accepted(text: str) -> float:
        return metric_sum(text, "otelcol_receiver_accepted_spans")

    def decided(text: str) -> float:
        return metric_sum(text, "otelcol_processor_tail_sampling_global_count_traces_sampled")

    done: Callable[[str], bool] = {
        "raw": lambda t: accepted(t) >= load.spans,
        "groupbytrace": lambda t: metric_sum(t, "otelcol_exporter_sent_spans") >= load.spans,
        "tail_sampling": lambda t: decided(t) >= load.traces,
    }[kind]
    try:
        timing = timed_by_metrics(
            proc,
            log_path,
            f"http://127.0.0.1:{port}/metrics",
            lambda t: accepted(t) > 0,
            done,
            f"the Collector ({kind})",
            poll_s=RAW_POLL_S if kind == "raw" else POLL_S,
            marks={"ingested": lambda t: accepted(t) >= load.spans},
        )
        counts = {}
        if kind == "tail_sampling":
            name = "otelcol_processor_tail_sampling_global_count_traces_sampled"
            counts["kept"] = metric_sum(timing.last, name, 'sampled="true"')
            counts["decided"] = decided(timing.last)
        return Result(
            COLLECTOR_READERS[kind],
            timing.seconds,
            load.spans,
            timing.cpu_s,
            peak_rss_mb(proc.pid),
            timing.marks,
            counts,
        )
    finally:
        stop(proc)
        log.close()


def collector_modules(binary: Path) -> dict[str, str]:
    """Each receiver and processor the Collector was built with: its name -> "module version"."""
    out = subprocess.run(
        [str(binary), "components"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    listed = yaml.safe_load(out)
    return {
        c["name"]: c["module"].rsplit("/", 1)[-1]
        for kind in ("receivers", "processors")
        for c in listed.get(kind) or []
    }


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (children of any of its threads, recursively)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo.extend(int(c) for c in children.read_text().split())
            except OSError:
                continue
    return found


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its descendants (the workers)."""
    ticks = 0
    for p in descendants(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / CLK_TCK


def tree_rss_mb(pid: int) -> float | None:
    """Peak RSS of ``pid`` plus its descendants' (the workers under ``--workers``)."""
    sizes = [size for p in descendants(pid) if (size := peak_rss_mb(p)) is not None]
    return sum(sizes) if sizes else None


async def wait_committed(
    bootstrap: str, topic: str, group: str, since: float, timeout_s: float = 120.0
) -> float:
    """Wait until ``group`` has committed the end of ``topic``; seconds since the timed start."""
    started = time.perf_counter() - since
    ends = await end_offsets(bootstrap, topic)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await committed_offsets(bootstrap, group, topic) == ends:
            break
        await asyncio.sleep(0.5)
    return time.perf_counter() - started


def sidecar_group(topic: str, workers: int, run: str) -> str:
    return f"bench-sidecar-{topic}-w{workers}-{run}"


def verdict_topic(topic: str, workers: int, run: str) -> str:
    return f"{topic}.verdicts.w{workers}.{run}"


def sidecar(
    bootstrap: str,
    topic: str,
    load: Load,
    work: Path,
    run: str,
    profile: Path | None = None,
    workers: int = 1,
) -> Result:
    port = free_port()
    work = work / f"sidecar-w{workers}-{run}"
    work.mkdir()
    rubrics = work / "rubrics"
    rubrics.mkdir()
    (rubrics / "bench.yaml").write_text(RUBRIC)
    config = work / "sidecar.yaml"
    config.write_text(
        f"""
rubrics_dir: {rubrics}
kafka:
  bootstrap_servers: "{bootstrap}"
  topic: {topic}
  group_id: {sidecar_group(topic, workers, run)}
  logs_topic: {topic}.logs.w{workers}.{run}
  dead_letter_topic: {topic}.dlq
  verdict_topic: {verdict_topic(topic, workers, run)}
assembler: {{decision_wait_s: 0.5}}
metrics: {{host: 127.0.0.1, port: {port}}}
review: {{enabled: false}}
otel: {{enabled: false}}
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "GEMINI_"))}
    # As a user does: the topics this configuration uses first (run checks that they exist).
    subprocess.run(
        [sys.executable, "-m", "sidecar", "topics", "create", "--config", str(config)],
        check=True,
        stdout=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    log_path = work / "sidecar.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar",
            "run",
            "--config",
            str(config),
            "--workers",
            str(workers),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    spy = None
    if profile is not None:
        # py-spy samples the running service from outside; it writes collapsed
        # stacks (one per line) when interrupted. --gil: only the thread holding
        # the GIL, so a thread waiting for it (planning thread vs event loop) is
        # not counted as busy.
        binary = shutil.which("py-spy") or sys.exit("--profile needs py-spy on PATH")
        spy = subprocess.Popen(
            [
                binary,
                "record",
                "--gil",
                "--format",
                "raw",
                "--rate",
                "200",
                "-o",
                str(profile),
                "--pid",
                str(proc.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        timing = timed_by_metrics(
            proc,
            log_path,
            f"http://127.0.0.1:{port}/metrics",
            lambda t: metric_sum(t, "sidecar_spans_total") > 0,
            lambda t: metric_sum(t, "sidecar_cases_total") >= load.traces,
            "sidecar run",
        )
        reader = f"sidecar run, {workers} worker{'s' if workers > 1 else ''}"
        # VmHWM: the peak so far, read before the processes stop.
        rss = tree_rss_mb(proc.pid)
        # The count of verdicts also counts a trace evaluated twice (a worker that
        # lost its partitions in a rebalance): stop only once every record is
        # committed, so each trace has its verdict, and say how long that took.
        caught_up = asyncio.run(
            wait_committed(bootstrap, topic, sidecar_group(topic, workers, run), timing.seconds)
        )
        return Result(
            reader, timing.seconds, load.spans, timing.cpu_s, rss, {"committed": caught_up}
        )
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        stop(proc)
        log.close()


READERS = ("bare", "raw", "groupbytrace", "tail_sampling", "sidecar")


def plan(skip: set[str], workers: list[int]) -> list[str]:
    """The reader names of one repeat, in their forward order (``sidecar`` once per count)."""
    if "collector" in skip:
        skip = skip | set(COLLECTOR_READERS)
    unknown = skip - {*READERS, "collector"}
    if unknown:
        sys.exit(f"--skip {','.join(sorted(unknown))}: not a reader; the readers: {READERS}")
    names = [r for r in READERS if r not in skip and r != "sidecar"]
    if "sidecar" not in skip:
        names += [f"sidecar_w{n}" for n in workers]
    return names


def median_of(results: list[Result]) -> dict[str, float]:
    return {
        "rate": statistics.median(r.rate for r in results),
        "per_cpu": statistics.median(r.per_cpu for r in results),
        "seconds": statistics.median(r.seconds for r in results),
        "cores": statistics.median(r.cpu_s / r.seconds for r in results),
        "rss": max((r.rss_mb for r in results if r.rss_mb is not None), default=float("nan")),
    }


def spread(values: list[float]) -> str:
    """min-max of the repeats, as a percentage of their median."""
    if len(values) < 2:
        return "-"
    middle = statistics.median(values)
    return f"±{50 * (max(values) - min(values)) / middle:.0f}%"


def report(runs: dict[str, list[Result]], load: Load, expected: Expected | None) -> str:
    """Print the table and ratios; return the summary line's fields."""
    print()
    print(
        f"{'reader':<26} {'spans/s':>9} {'spread':>6} {'spans/CPU-s':>12} {'spread':>6} "
        f"{'cores':>5} {'wall s':>7} {'RSS MB':>7}  runs"
    )
    medians = {name: median_of(results) for name, results in runs.items()}
    for name, results in runs.items():
        m = medians[name]
        rss = f"{m['rss']:7.0f}" if m["rss"] == m["rss"] else f"{'-':>7}"
        print(
            f"{results[0].reader:<26} {m['rate']:>9.0f} {spread([r.rate for r in results]):>6} "
            f"{m['per_cpu']:>12.0f} {spread([r.per_cpu for r in results]):>6} "
            f"{m['cores']:>5.2f} {m['seconds']:>7.2f} {rss}  {len(results)}"
        )
    print()
    summary = [f"{name}={m['rate']:.0f}/{m['per_cpu']:.0f}" for name, m in medians.items()]

    def ratio(a: str, b: str, label: str) -> None:
        if a in medians and b in medians:
            wall = medians[a]["rate"] / medians[b]["rate"]
            core = medians[a]["per_cpu"] / medians[b]["per_cpu"]
            print(f"{label:<44} per CPU-s {core:6.3f}   per wall s {wall:6.3f}")
            summary.append(f"{a}/{b}={core:.3f}/{wall:.3f}")

    for key in [k for k in medians if k.startswith("sidecar")]:
        ratio(key, "tail_sampling", f"{key} / Collector tail_sampling")
    for key in [k for k in medians if k.startswith("sidecar")]:
        ratio(key, "raw", f"{key} / Collector kafkareceiver")
    ratio("tail_sampling", "raw", "Collector tail_sampling / kafkareceiver")
    ratio("sidecar_w2", "sidecar_w1", "sidecar_w2 / sidecar_w1")
    if "tail_sampling" in runs:
        results = runs["tail_sampling"]
        tails = [r.seconds - r.marks.get("ingested", r.seconds) for r in results]
        ingest = [r.marks.get("ingested", r.seconds) for r in results]
        print(
            f"tail_sampling: all spans in after {statistics.median(ingest):.2f} s, the last "
            f"decision {statistics.median(tails):.2f} s later (decision_wait {DECISION_WAIT} "
            f"+ up to one 1 s tick), medians"
        )
        kept = "/".join(f"{k:.0f}" for k in sorted({r.counts.get("kept", -1.0) for r in results}))
        line = f"tail_sampling kept {kept} of {load.traces}"
        if expected is not None:
            want = expected.failed | load.error_or_slow
            line += (
                f"; the replay fails {len(expected.failed)}, and with the "
                f"{len(load.error_or_slow)} error or slow ones {len(want)}"
            )
            summary.append(f"kept={kept}/{len(want)}")
        print(line)
    return " ".join(summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--bootstrap", default=os.environ.get("SIDECAR_TEST_KAFKA"))
    parser.add_argument(
        "--otelcol",
        type=Path,
        default=CACHE / "otelcol-bench" / "otelcol-bench",
        help="the Collector with kafkareceiver, groupbytrace and tail_sampling (one with "
        "only the kafkareceiver runs that reader alone)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated: bare, raw, groupbytrace, tail_sampling, collector (all three), sidecar",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the first repeat's sidecar runs with py-spy into this file (raw stacks; "
        "-wN is added before the suffix)",
    )
    parser.add_argument(
        "--workers",
        default="1,2",
        help="comma-separated worker counts to run sidecar with (default 1,2)",
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="copy each reader's log into this directory at the end"
    )
    args = parser.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    workers = [int(w) for w in args.workers.split(",")]
    names = plan(skip, workers)
    modules: dict[str, str] = {}
    if any(n in COLLECTOR_READERS for n in names):
        if not args.otelcol.is_file():
            sys.exit(
                f"no Collector at {args.otelcol}: run scripts/build-collector "
                "bench/collector/builder-config.yaml (or --skip collector)"
            )
        modules = collector_modules(args.otelcol)
        missing = [n for n in names if n in ("groupbytrace", "tail_sampling") and n not in modules]
        if missing:
            # The test suite's Collector has no such processors: its kafkareceiver still runs.
            print(
                f"skipped {', '.join(missing)}: {args.otelcol} has no such processor "
                "(scripts/build-collector bench/collector/builder-config.yaml builds one that has)"
            )
            names = [n for n in names if n not in missing]

    runs: dict[str, list[Result]] = {name: [] for name in names}
    checks: list[str] = []
    expected: Expected | None = None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker_state = None
        bootstrap = args.bootstrap
        if not bootstrap:
            broker_state = work / "kafka"
            subprocess.run(
                [sys.executable, str(REPO / "scripts/kafka/broker.py"), "start", str(broker_state)],
                check=True,
            )
            bootstrap = (broker_state / "bootstrap").read_text().strip()
        try:
            load = make_load(args.traces)
            if modules:
                used = ["kafka", *(n for n in ("groupbytrace", "tail_sampling") if n in names)]
                print(f"Collector {args.otelcol}: " + ", ".join(modules[n] for n in used))
            print(
                f"load: {load.traces} traces, {load.spans} spans, "
                f"{load.payload_bytes / load.spans:.0f} bytes/span, {args.partitions} partitions, "
                f"{args.repeats} repeats of {', '.join(names)}",
                flush=True,
            )
            topic = f"bench.{uuid.uuid4().hex[:8]}"
            asyncio.run(produce(bootstrap, topic, args.partitions, load))
            if any(n.startswith("sidecar") for n in names) or "tail_sampling" in names:
                rubric_dir = work / "expected-rubrics"
                rubric_dir.mkdir()
                (rubric_dir / "bench.yaml").write_text(RUBRIC)
                expected = expected_verdicts(load, rubric_dir)
            for repeat in range(args.repeats):
                order = names if repeat % 2 == 0 else names[::-1]
                run = f"r{repeat}"
                for name in order:
                    if name == "bare":
                        result = asyncio.run(bare_consumer(bootstrap, topic, load))
                    elif name in COLLECTOR_READERS:
                        result = collector(args.otelcol, bootstrap, topic, load, work, name, run)
                    else:
                        n = int(name.removeprefix("sidecar_w"))
                        profile = None
                        if args.profile is not None and repeat == 0:
                            profile = args.profile.with_name(
                                f"{args.profile.stem}-w{n}{args.profile.suffix}"
                            )
                        result = sidecar(bootstrap, topic, load, work, run, profile, n)
                        assert expected is not None
                        got = asyncio.run(
                            read_verdicts(
                                bootstrap, verdict_topic(topic, n, run), len(expected.lines)
                            )
                        )
                        what = f"sidecar run --workers {n} ({run})"
                        checks.append(check_verdicts(got, expected.lines, what))
                        if len(got) > len(expected.lines):
                            # Timed to the count of verdicts, which the redelivered ones
                            # reached early: the wall time to the last commit is a bound.
                            checks.append(
                                f"{what}: {len(got) - len(expected.lines)} verdicts redelivered, "
                                f"every record committed {result.marks['committed']:.1f} s after "
                                f"the first span (timed: {result.seconds:.1f} s)"
                            )
                        checks.append(
                            asyncio.run(
                                check_offsets(
                                    bootstrap,
                                    topic,
                                    sidecar_group(topic, n, run),
                                    work / f"sidecar-w{n}-{run}" / "sidecar.log",
                                )
                            )
                        )
                    runs[name].append(result)
                    print(
                        f"  {run} {result.reader:<26} {result.rate:>9.0f} spans/s "
                        f"{result.per_cpu:>9.0f} spans/CPU-s ({result.seconds:.2f} s, "
                        f"{result.cpu_s:.2f} CPU-s)",
                        flush=True,
                    )
        finally:
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for found in work.glob("*/*.log"):
                    shutil.copy(found, args.keep_logs / f"{found.parent.name}-{found.name}")
            if broker_state is not None:
                subprocess.run(
                    [
                        sys.executable,
                        str(REPO / "scripts/kafka/broker.py"),
                        "stop",
                        str(broker_state),
                    ],
                    check=False,
                )
    for line in checks:
        print(line)
    summary = report(runs, load, expected)
    if checks:
        # check_verdicts exits on a difference: here every run's records were the replay's.
        summary += " verdicts=replay"
    print(f"bench_kafka: spans={load.spans} repeats={args.repeats} {summary}")


if __name__ == "__main__":
    main()
