"""The deploy configs carry the logs input: the Collector exports logs as sidecar reads them.

``otelcol validate`` of the same files runs in ``tests/test_deploy.py`` with the
real Collector binary; here the settings that make logs usable are pinned:
the kafka exporter's logs topic is sidecar's default ``kafka.logs_topic``, in
``otlp_proto``, keyed by trace id, in a logs pipeline; the topics are created
with equal partition counts; the Kubernetes config names the topic.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from sidecar.settings import Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def test_agents_collector_exports_logs_keyed_by_trace_id() -> None:
    config = yaml.safe_load((DEPLOY / "collector" / "agents.yaml").read_text(encoding="utf-8"))
    kafka = config["exporters"]["kafka"]
    assert kafka["logs"] == {"topic": Settings().kafka.logs_topic, "encoding": "otlp_proto"}
    assert kafka["partition_logs_by_trace_id"] is True
    assert kafka["partition_traces_by_id"] is True
    logs = [p for name, p in config["service"]["pipelines"].items() if name.startswith("logs")]
    assert [p["exporters"] for p in logs] == [["kafka"]]
    assert logs[0]["receivers"] == ["otlp"]


def test_compose_creates_both_topics_with_equal_partitions() -> None:
    text = (DEPLOY / "compose.yaml").read_text(encoding="utf-8")
    counts = dict(re.findall(r"\b(otlp_spans|otlp_logs):(\d+)\b", text))
    assert counts["otlp_logs"] == counts["otlp_spans"]


def test_kubernetes_config_reads_the_logs_topic() -> None:
    config = yaml.safe_load((DEPLOY / "k8s" / "base" / "config.yaml").read_text(encoding="utf-8"))
    assert config["kafka"]["logs_topic"] == "otlp_logs"
    assert Settings(**config).kafka.logs_topic == "otlp_logs"
