"""Kafka-path throughput, side by side, in one run on one topic of the real broker.

Produces ``--traces`` agent traces (OTel GenAI conventions, one OTLP protobuf
record per trace keyed by its hex trace id, as the Collector's kafka exporter
with ``partition_traces_by_id`` writes them) to a fresh topic, then lets three
readers consume the same topic, each in its own consumer group:

- a bare aiokafka consumer (no decoding): the ceiling of the client;
- the OpenTelemetry Collector's kafkareceiver (``scripts/build-collector``),
  decoding to pdata, into the debug exporter;
- ``sidecar run`` with the judge off and a rubric using every check type,
  from the first span read to the last verdict record acknowledged.

Each sidecar run writes to its own verdict topic, which is read back after the
run: every trace must have its verdict record, and the distinct records must be
byte for byte those a replay of the same records and rubric gives, apart from
``decided_at`` (the service's clock; the replay's is the trace's end plus the
decision wait) (at-least-once redeliveries are counted), and once the run stopped its group's committed
offsets must be the topic's end offsets; any difference ends the benchmark with
exit 1. The summary's ``verdicts=replay`` says both held.

Each reader's rate is spans / (time of its last span or verdict - time of its
first span read); the Collector and the sidecar are timed from their own
metrics endpoints, polled every 100 ms (the Collector every 20 ms). Figures on a shared machine are noisy:
compare the ratios printed at the end, which are measured in the same run.

    .venv/bin/python bench/bench_kafka.py [--traces 10000] [--partitions 3]
        [--bootstrap HOST:PORT] [--otelcol PATH] [--skip collector,sidecar]
        [--profile stacks.txt]   # sidecar run sampled by py-spy (collapsed stacks)
        [--workers 1,2]          # sidecar run once per worker count (sidecar run --workers N)

Without ``--bootstrap`` (or ``SIDECAR_TEST_KAFKA``) a broker is started with
``scripts/kafka/broker.py`` and stopped afterwards. The last line is one
summary that CI logs can keep.
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
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402

from bench.bench_replay import replay_verdicts  # noqa: E402
from bench.verdict_digest import without  # noqa: E402
from sidecar.evaluate.rubric import load_rubrics  # noqa: E402
from sidecar.wire.verdicts import verdict_json  # noqa: E402
from tests.agents.genai_spans import make_cases  # noqa: E402
from tests.agents.otlp import encode_request  # noqa: E402
from tests.integration.harness import (  # noqa: E402
    committed_offsets,
    create_topics,
    end_offsets,
)

CACHE = Path(os.environ.get("SIDECAR_CACHE", Path.home() / ".cache" / "sidecar"))
# How often each timed reader's /metrics is polled. Each scrape costs the reader
# CPU (at 20 ms it was 5 % of the sidecar's profile), and the interval bounds the
# timing's resolution: 0.1 s on the sidecar's runs of 10 s and more is 1 %; the
# Collector reads 10,000 traces in under a second, so it is polled every 20 ms.
POLL_S = 0.1
COLLECTOR_POLL_S = 0.02

# Every check type, on both agents of the generated traces.
RUBRIC = """
id: bench-all-checks
version: "1"
checks:
  - {name: allowed_tools, type: tool_allowlist,
     tools: [lookup_order, issue_refund, get_user_details, get_reservation_details, cancel_reservation]}
  - {name: no_delete, type: tool_denylist, tools: [delete_account]}
  - {name: at_most_8_calls, type: max_tool_calls, limit: 8}
  - name: refund_args
    type: tool_arguments
    tool: issue_refund
    schema: {type: object, required: [order_id, amount], properties: {amount: {type: number, maximum: 500}}}
  - name: looked_up_first
    type: required_tool_calls
    order: any_order
    calls: [{name: lookup_order}]
    gate: false
  - {name: no_apology_loop, type: answer_regex, must_not_match: "(?i)as an ai language model"}
  - {name: answer_is_text, type: answer_json_schema, schema: {type: string}, gate: false}
  - {name: fast_enough, type: max_latency_ms, limit: 30000, gate: false}
  - {name: no_error_spans, type: no_error_spans}
  - {name: amount_grounded, type: grounded_numbers}
"""


@dataclass(frozen=True, slots=True)
class Load:
    records: list[tuple[bytes, bytes]]
    spans: int
    traces: int
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class Result:
    reader: str
    seconds: float
    spans: int
    rss_mb: float | None = None
    # CPU cores busy on average while timed (the sidecar's processes), when measured.
    cores: float | None = None

    @property
    def rate(self) -> float:
        return self.spans / self.seconds if self.seconds > 0 else float("inf")


def make_load(traces: int) -> Load:
    cases = make_cases(traces, seed=7)
    records = [(c.trace_id.encode(), encode_request(c.spans)) for c in cases]
    spans = sum(len(c.spans) for c in cases)
    return Load(records, spans, len(cases), sum(len(v) for _, v in records))


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
        while seen < len(load.records):
            # The clock starts at the fetch that brought the first records, so
            # that fetch counts too (the others are timed from their first span).
            asked = time.perf_counter()
            batches = await consumer.getmany(timeout_ms=100, max_records=5000)
            got = sum(len(records) for records in batches.values())
            if got and first is None:
                first = asked
            seen += got
        assert first is not None
        return Result("bare aiokafka consumer", time.perf_counter() - first, load.spans)
    finally:
        await consumer.stop()


# The key the service fills from its clock (``sidecar.wire.verdicts``), left out of the comparison.
CLOCKED = ("decided_at",)


def expected_verdicts(load: Load, rubric_dir: Path) -> list[str]:
    """The replay's verdict records of the same records and rubric, as sorted JSON lines."""
    verdicts = replay_verdicts([record for _, record in load.records], load_rubrics(rubric_dir))
    return sorted(without(verdict_json(v), CLOCKED) for v in verdicts)


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
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and where in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def timed_by_metrics(
    proc: subprocess.Popen[bytes],
    log: Path,
    url: str,
    started: Callable[[str], bool],
    done: Callable[[str], bool],
    what: str,
    timeout_s: float = 600.0,
    cpu: list[float] | None = None,
    poll_s: float = POLL_S,
) -> float:
    """Seconds from the first poll where ``started`` holds to the first where ``done`` does.

    ``cpu``, when given, receives the CPU seconds ``proc`` and its children
    used between those two polls.
    """
    deadline = time.monotonic() + timeout_s
    first: float | None = None
    cpu_at_first = 0.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{what} exited with {proc.returncode} before it finished:\n{tail}")
        text = scrape(url)
        now = time.perf_counter()
        if first is None and text and started(text):
            first = now
            cpu_at_first = tree_cpu_s(proc.pid)
        if first is not None and done(text):
            if cpu is not None:
                cpu.append(tree_cpu_s(proc.pid) - cpu_at_first)
            return now - first
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


def collector(binary: Path, bootstrap: str, topic: str, load: Load, work: Path) -> Result:
    port = free_port()
    config = work / "otelcol.yaml"
    config.write_text(
        f"""
receivers:
  kafka:
    brokers: ["{bootstrap}"]
    group_id: bench-otelcol-{uuid.uuid4().hex[:8]}
    initial_offset: earliest
    traces:
      topics: ["{topic}"]
      encoding: otlp_proto
exporters:
  debug:
    verbosity: basic
service:
  telemetry:
    logs: {{level: warn}}
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus: {{host: 127.0.0.1, port: {port}}}
  pipelines:
    traces:
      receivers: [kafka]
      exporters: [debug]
"""
    )
    log_path = work / "otelcol.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [str(binary), "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    name = "otelcol_receiver_accepted_spans"
    try:
        seconds = timed_by_metrics(
            proc,
            log_path,
            f"http://127.0.0.1:{port}/metrics",
            lambda t: metric_sum(t, name) + metric_sum(t, name + "_total") > 0,
            lambda t: metric_sum(t, name) + metric_sum(t, name + "_total") >= load.spans,
            "the Collector",
            poll_s=COLLECTOR_POLL_S,
        )
        return Result("Collector kafkareceiver", seconds, load.spans, peak_rss_mb(proc.pid))
    finally:
        stop(proc)
        log.close()


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its children (the workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [pid, *(int(c) for c in children.read_text().split())] if children.exists() else [pid]
    ticks = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_rss_mb(pid: int) -> float | None:
    """Peak RSS of ``pid`` plus its children's (the workers under ``--workers``)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [pid, *(int(c) for c in children.read_text().split())] if children.exists() else [pid]
    sizes = [size for p in pids if (size := peak_rss_mb(p)) is not None]
    return sum(sizes) if sizes else None


def sidecar_group(topic: str, workers: int) -> str:
    return f"bench-sidecar-{topic}-w{workers}"


def sidecar(
    bootstrap: str,
    topic: str,
    load: Load,
    work: Path,
    profile: Path | None = None,
    workers: int = 1,
) -> Result:
    port = free_port()
    work = work / f"sidecar-w{workers}"
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
  group_id: {sidecar_group(topic, workers)}
  logs_topic: {topic}.logs
  dead_letter_topic: {topic}.dlq
  verdict_topic: {topic}.verdicts.w{workers}
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
    rss: list[float] = []
    cpu: list[float] = []
    try:
        seconds = timed_by_metrics(
            proc,
            log_path,
            f"http://127.0.0.1:{port}/metrics",
            lambda t: metric_sum(t, "sidecar_spans_total") > 0,
            lambda t: (
                metric_sum(t, "sidecar_cases_total") >= load.traces
                and bool(rss.append(tree_rss_mb(proc.pid) or 0.0) or True)
            ),
            "sidecar run",
            cpu=cpu,
        )
        reader = f"sidecar run, {workers} worker{'s' if workers > 1 else ''}"
        return Result(reader, seconds, load.spans, rss[-1] if rss else None, cpu[0] / seconds)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        stop(proc)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--bootstrap", default=os.environ.get("SIDECAR_TEST_KAFKA"))
    parser.add_argument(
        "--otelcol",
        type=Path,
        default=Path(os.environ.get("SIDECAR_OTELCOL", CACHE / "otelcol" / "otelcol-sidecar")),
    )
    parser.add_argument("--skip", default="", help="comma-separated: collector, sidecar")
    parser.add_argument(
        "--profile", type=Path, help="sample sidecar run with py-spy into this file (raw stacks)"
    )
    parser.add_argument(
        "--workers",
        default="1",
        help="comma-separated worker counts to run sidecar with, e.g. 1,2 (default 1)",
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="copy each reader's log into this directory at the end"
    )
    args = parser.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if "collector" not in skip and not args.otelcol.is_file():
        sys.exit(
            f"no Collector at {args.otelcol}: run scripts/build-collector (or --skip collector)"
        )

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
            print(
                f"load: {load.traces} traces, {load.spans} spans, "
                f"{load.payload_bytes / load.spans:.0f} bytes/span, {args.partitions} partitions",
                flush=True,
            )
            topic = f"bench.{uuid.uuid4().hex[:8]}"
            asyncio.run(produce(bootstrap, topic, args.partitions, load))
            results = [asyncio.run(bare_consumer(bootstrap, topic, load))]
            checks: list[str] = []
            if "collector" not in skip:
                results.append(collector(args.otelcol, bootstrap, topic, load, work))
            if "sidecar" not in skip:
                rubric_dir = work / "expected-rubrics"
                rubric_dir.mkdir()
                (rubric_dir / "bench.yaml").write_text(RUBRIC)
                expected = expected_verdicts(load, rubric_dir)
                for n in (int(w) for w in args.workers.split(",")):
                    results.append(sidecar(bootstrap, topic, load, work, args.profile, n))
                    got = asyncio.run(
                        read_verdicts(bootstrap, f"{topic}.verdicts.w{n}", len(expected))
                    )
                    checks.append(check_verdicts(got, expected, f"sidecar run --workers {n}"))
                    checks.append(
                        asyncio.run(
                            check_offsets(
                                bootstrap,
                                topic,
                                sidecar_group(topic, n),
                                work / f"sidecar-w{n}" / "sidecar.log",
                            )
                        )
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
    for r in results:
        rss = f", peak RSS {r.rss_mb:.0f} MB" if r.rss_mb is not None else ""
        rss += f", {r.cores:.2f} cores busy" if r.cores is not None else ""
        print(f"{r.reader:<26} {r.rate:>10.0f} spans/s  ({r.seconds:.2f} s{rss})")
    rates = {_key(r.reader): r.rate for r in results}
    summary = " ".join(f"{k}={v:.0f}" for k, v in rates.items())
    for key in [k for k in rates if k.startswith("sidecar")]:
        if "Collector" in rates:
            summary += f" {key}/collector={rates[key] / rates['Collector']:.3f}"
        summary += f" {key}/bare={rates[key] / rates['bare']:.3f}"
    if "sidecar_w1" in rates and "sidecar_w2" in rates:
        summary += f" scaling_w2/w1={rates['sidecar_w2'] / rates['sidecar_w1']:.2f}"
    if checks:
        # check_verdicts exits on a difference: here every run's records were the replay's.
        summary += " verdicts=replay"
    print(f"bench_kafka: spans={load.spans} {summary}")


def _key(reader: str) -> str:
    if reader.startswith("sidecar run, "):
        return f"sidecar_w{reader.split()[2]}"
    return reader.split()[0]


if __name__ == "__main__":
    main()
