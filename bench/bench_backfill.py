"""``sidecar backfill`` throughput on the real broker, judge off.

Produces ``--traces`` agent traces (OTel GenAI conventions, one OTLP protobuf
record per trace keyed by its hex trace id) to a fresh topic, their record
timestamps spread evenly over the last ``--hours`` hours, then runs

    sidecar backfill --config CONFIG --from <start of that window> --quiet

with a rubric using every check type and no judge, into a fresh verdict
topic. The figures are the command's own summary line (spans/s and traces/s
from the start of reading to the last verdict acknowledged) and the wall time
of the whole process (start-up, connecting and leaving included).

    .venv/bin/python bench/bench_backfill.py [--traces 5000] [--partitions 3]
        [--hours 2] [--bootstrap HOST:PORT]

Without ``--bootstrap`` (or ``SIDECAR_TEST_KAFKA``) a broker is started with
``scripts/kafka/broker.py`` and stopped afterwards. The last line is one
summary that CI logs can keep.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from tests.agents.genai_spans import make_cases  # noqa: E402
from tests.agents.otlp import encode_request  # noqa: E402
from tests.integration.harness import environ_without, run_python  # noqa: E402

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


async def produce(
    bootstrap: str, topics: list[str], partitions: int, traces: int, start: datetime, hours: float
) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
    finally:
        await admin.close()
    cases = make_cases(traces, seed=7)
    step_ms = hours * 3600 * 1000 / max(1, traces)
    first_ms = int(start.timestamp() * 1000)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_request_size=8 * 1024 * 1024
    )
    await producer.start()
    try:
        sent = [
            await producer.send(
                topics[0],
                encode_request(case.spans),
                key=case.trace_id.encode(),
                timestamp_ms=first_ms + int(index * step_ms),
            )
            for index, case in enumerate(cases)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return sum(len(c.spans) for c in cases)


def run(bootstrap: str, traces: int, partitions: int, hours: float, work: Path) -> None:
    topic = f"bench.{uuid.uuid4().hex[:8]}"
    out = f"{topic}.backfill"
    start = datetime.now(UTC) - timedelta(hours=hours)
    spans = asyncio.run(produce(bootstrap, [topic, out], partitions, traces, start, hours))
    print(
        f"load: {traces} traces, {spans} spans over {hours} h, {partitions} partitions", flush=True
    )
    rubrics = work / "rubrics"
    rubrics.mkdir()
    (rubrics / "all.yaml").write_text(RUBRIC)
    config = work / "sidecar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "rubrics_dir": str(rubrics),
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "topic": topic,
                    "group_id": f"{topic}.live",
                    "backfill_verdict_topic": out,
                },
            }
        )
    )
    began = time.monotonic()
    done = run_python(
        *("-m", "sidecar", "backfill", "--config", str(config)),
        *("--from", start.isoformat(), "--quiet"),
        env=environ_without("SIDECAR_", "GOOGLE_", "GEMINI_"),
    )
    wall = time.monotonic() - began
    if done.returncode != 0:
        sys.exit(f"sidecar backfill exited {done.returncode}:\n{done.stderr}")
    line = done.stderr.strip().splitlines()[-1]
    print(line)
    found = re.search(r"(\d+) spans/s, (\d+) traces/s", line)
    assert found is not None, line
    print(
        f"bench_backfill: traces={traces} spans={spans} spans_per_s={found[1]} "
        f"traces_per_s={found[2]} wall_s={wall:.1f} wall_traces_per_s={traces / wall:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--bootstrap", default=os.environ.get("SIDECAR_TEST_KAFKA"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = [sys.executable, str(REPO / "scripts/kafka/broker.py")]
        state = None
        bootstrap = args.bootstrap
        if not bootstrap:
            state = work / "kafka"
            subprocess.run([*broker, "start", str(state)], check=True)
            bootstrap = (state / "bootstrap").read_text().strip()
        try:
            run(bootstrap, args.traces, args.partitions, args.hours, work)
        finally:
            if state is not None:
                subprocess.run([*broker, "stop", str(state)], check=False)


if __name__ == "__main__":
    main()
