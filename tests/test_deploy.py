"""Deployment files: Kubernetes base, image, collector configs, compose stack.

What real tools exist here is used: ``kubectl kustomize`` builds the base,
sidecar's own settings and rubric loaders read the shipped config and rubric,
and the OpenTelemetry Collector binary built by scripts/build-collector
validates the collector configs. Where no tool exists (no Docker daemon, no
Kubernetes API server), the checks are structural.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.evaluate.rubric import load_rubrics
from sidecar.settings import Settings, load_settings
from sidecar.topic_plan import COPARTITIONED, TopicSpec, plan
from tests import realparts

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S_BASE = DEPLOY / "k8s" / "base"
COLLECTOR = DEPLOY / "collector"
K8S_FILES = sorted(p for p in (DEPLOY / "k8s").rglob("*.yaml") if "rubrics" not in p.parts)


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def manifests() -> list[dict[str, Any]]:
    kustomization = read_yaml(K8S_BASE / "kustomization.yaml")
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs.extend(
            d for d in yaml.safe_load_all((K8S_BASE / name).read_text(encoding="utf-8")) if d
        )
    return docs


def by_kind(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in manifests() if d["kind"] == kind]
    return doc


def container() -> dict[str, Any]:
    (c,) = by_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    return c


# ------------------------------------------------------------------ Kubernetes


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_k8s_file_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert docs
    if path.name in {"kustomization.yaml", "config.yaml"}:
        return
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys()
        assert doc["metadata"]["name"]


def test_kustomization_lists_existing_files() -> None:
    kustomization = read_yaml(K8S_BASE / "kustomization.yaml")
    listed = list(kustomization["resources"])
    for generator in kustomization["configMapGenerator"]:
        listed.extend(generator["files"])
    for name in listed:
        assert (K8S_BASE / name).is_file(), name
    on_disk = {p.name for p in K8S_BASE.glob("*.yaml")} - {"kustomization.yaml", "config.yaml"}
    assert on_disk == set(kustomization["resources"]), "a manifest is not listed in resources"


def test_base_has_the_required_kinds() -> None:
    kinds = sorted(d["kind"] for d in manifests())
    assert kinds == ["Deployment", "PodDisruptionBudget", "PodMonitor", "Service", "ServiceAccount"]


KUSTOMIZE = shutil.which("kustomize")
KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(
    KUSTOMIZE is None and KUBECTL is None, reason="neither kustomize nor kubectl installed"
)
def test_kustomize_build() -> None:
    cmd = (
        [KUSTOMIZE, "build", str(K8S_BASE)]
        if KUSTOMIZE
        else [str(KUBECTL), "kustomize", str(K8S_BASE)]
    )
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",
            "PodMonitor",
            "Service",
            "ServiceAccount",
        ]
    )
    config_maps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    referenced = {v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v}
    # Generated names carry a content hash, and the Deployment must point at them.
    assert referenced == config_maps
    assert all(re.fullmatch(r"sidecar-(config|rubrics)-[a-z0-9]{10}", n) for n in config_maps)
    assert spec["containers"][0]["image"] == "sidecar:0.1.0"


@pytest.mark.parametrize(
    ("probe", "path"),
    [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")],
)
def test_deployment_probes(probe: str, path: str) -> None:
    http = container()[probe]["httpGet"]
    assert http == {"path": path, "port": "metrics"}


def test_deployment_exposes_metrics_port() -> None:
    assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in container()["ports"]


def test_deployment_resources() -> None:
    resources = container()["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= resources[kind].keys()


def test_deployment_runs_as_non_root() -> None:
    pod = by_kind("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    ctx = container()["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"]["drop"] == ["ALL"]


def test_judge_credentials_come_from_a_secret() -> None:
    env = {e["name"]: e for e in container()["env"]}
    ref = env["GOOGLE_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "sidecar-judge-credentials", "key": "GOOGLE_API_KEY"}
    assert "value" not in env["GOOGLE_API_KEY"]


def test_verdict_spans_go_to_the_verdict_collector() -> None:
    env = {e["name"]: e.get("value") for e in container()["env"]}
    assert "verdicts" in env["OTEL_EXPORTER_OTLP_ENDPOINT"]


def test_config_and_rubrics_mounted_where_the_image_expects() -> None:
    mounts = {m["name"]: m for m in container()["volumeMounts"]}
    assert mounts["config"]["mountPath"] == "/etc/sidecar/config.yaml"
    config = read_yaml(K8S_BASE / "config.yaml")
    assert mounts["rubrics"]["mountPath"] == config["rubrics_dir"]


def test_shutdown_fits_the_grace_period() -> None:
    grace = by_kind("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert load_settings(K8S_BASE / "config.yaml").shutdown_timeout_s < grace


@pytest.mark.parametrize("kind", ["Service", "PodDisruptionBudget", "PodMonitor"])
def test_selectors_match_the_pods(kind: str) -> None:
    doc = by_kind(kind)
    selector = doc["spec"]["selector"]
    wanted = selector.get("matchLabels", selector)
    pod_labels = by_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert wanted.items() <= pod_labels.items()


def test_podmonitor_job_label_is_sidecar() -> None:
    monitor = by_kind("PodMonitor")["spec"]
    pod_labels = by_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    # The alerts and dashboards select job="sidecar".
    assert pod_labels[monitor["jobLabel"]] == "sidecar"
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"


def test_config_is_valid_for_sidecar() -> None:
    settings = load_settings(K8S_BASE / "config.yaml")
    assert settings.kafka.topic == "otlp_spans"
    assert settings.kafka.dead_letter_topic
    assert settings.kafka.verdict_topic
    assert settings.metrics.port == 9464
    assert str(settings.rubrics_dir) == "/etc/sidecar/rubrics"
    assert settings.judge.backend.value in {"gemini", "vertex", "openai"}


def test_config_names_every_documented_key() -> None:
    config = read_yaml(K8S_BASE / "config.yaml")
    assert {
        "bootstrap_servers",
        "topic",
        "group_id",
        "dead_letter_topic",
        "verdict_topic",
    } <= config["kafka"].keys()
    assert {
        "decision_wait_s",
        "max_trace_age_s",
        "max_open_traces",
        "max_spans_per_trace",
    } <= config["assembler"].keys()
    assert {"backend", "api_version"} <= config["judge"].keys()
    assert config["metrics"]["port"] == 9464


def test_example_rubric_is_valid() -> None:
    (rubric,) = load_rubrics(K8S_BASE / "rubrics")
    assert rubric.judge is not None


# ------------------------------------------------------------------ image


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text(encoding="utf-8")


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", dockerfile())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_is_multi_stage_on_python_311_slim() -> None:
    froms = [rest for word, rest in instructions() if word == "FROM"]
    assert len(froms) >= 2
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in dockerfile()
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    assert any("--from=build" in rest for word, rest in instructions() if word == "COPY")


def test_dockerfile_runs_as_non_root() -> None:
    users = [rest for word, rest in instructions() if word == "USER"]
    assert users, "no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}


def test_dockerfile_healthcheck_uses_python_on_healthz() -> None:
    (check,) = [rest for word, rest in instructions() if word == "HEALTHCHECK"]
    assert '"python"' in check
    assert "/healthz" in check
    assert "127.0.0.1" in check


def test_dockerfile_entrypoint_and_port() -> None:
    ins = dict(instructions())
    assert ins["ENTRYPOINT"] == '["sidecar"]'
    assert ins["CMD"] == '["run", "--config", "/etc/sidecar/config.yaml"]'
    assert ins["EXPOSE"] == "9464"


def _ignore_pattern_matches(pattern: str, path: str) -> bool:
    # Docker's rules, simplified: a pattern matches the path or a parent of
    # it; a leading "**/" matches at any depth.
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    if pattern.startswith("**/"):
        pattern = pattern[3:]
        candidates = [
            c
            for i in range(len(parts))
            for c in ["/".join(parts[i : j + 1]) for j in range(i, len(parts))]
        ]
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def _dockerignore_allows(path: str) -> bool:
    """Whether the build context keeps ``path`` (the last matching rule wins)."""
    allowed = True
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if _ignore_pattern_matches(line.lstrip("!").rstrip("/"), path):
            allowed = negate
    return allowed


def test_dockerfile_copies_only_what_the_context_sends() -> None:
    sources = []
    for word, rest in instructions():
        if word == "COPY" and "--from=" not in rest:
            sources.extend(rest.split()[:-1])
    assert sources
    for source in sources:
        assert (ROOT / source).exists() or source == "README.md", source
        assert _dockerignore_allows(source), f".dockerignore excludes {source}"


@pytest.mark.parametrize("path", [".git", ".venv", "tests", "dashboards", "sidecar/__pycache__"])
def test_dockerignore_keeps_out(path: str) -> None:
    assert not _dockerignore_allows(path)


# ------------------------------------------------------------------ collector


def collector(name: str) -> dict[str, Any]:
    config: dict[str, Any] = read_yaml(COLLECTOR / name)
    return config


COLLECTOR_CONFIGS = ["agents.yaml", "agents-sasl-ssl.yaml", "verdicts.yaml"]


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_collector_pipelines_reference_defined_components(name: str) -> None:
    config = collector(name)
    for pipeline in config["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"{component} is not defined under {kind}"


def test_agents_collector_writes_otlp_proto_partitioned_by_trace() -> None:
    kafka = collector("agents.yaml")["exporters"]["kafka"]
    assert kafka["traces"] == {"topic": "otlp_spans", "encoding": "otlp_proto"}
    assert kafka["partition_traces_by_id"] is True
    assert "otlp" in collector("agents.yaml")["receivers"]


def ports_of(config: dict[str, Any]) -> set[int]:
    """Every port a Collector config listens on: its receivers and its own telemetry."""
    ports: set[int] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "endpoint" and isinstance(value, str):
                    ports.add(int(value.rsplit(":", 1)[1]))
                elif key == "port":
                    ports.add(int(value))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(config["receivers"])
    walk(config["service"].get("telemetry", {}))
    return ports


@pytest.mark.parametrize("agents", ["agents.yaml", "agents-sasl-ssl.yaml"])
def test_collectors_run_side_by_side_on_one_host(agents: str) -> None:
    """No port in common, and each names its telemetry port (else both take 8888)."""
    ours, theirs = ports_of(collector(agents)), ports_of(collector("verdicts.yaml"))
    assert {4317, 4318, 8888} <= ours
    assert len(theirs) == 3
    assert not ours & theirs, ours & theirs


def test_sasl_ssl_exporter_is_the_agents_one_with_authentication() -> None:
    plain, secure = collector("agents.yaml"), collector("agents-sasl-ssl.yaml")
    kafka = secure["exporters"].pop("kafka")
    assert kafka.pop("auth") == {
        "sasl": {
            "username": "${env:KAFKA_USERNAME}",
            "password": "${env:KAFKA_PASSWORD}",
            "mechanism": "SCRAM-SHA-512",
        }
    }
    assert kafka.pop("tls") == {"ca_file": "${env:KAFKA_CA_FILE}", "insecure_skip_verify": False}
    assert kafka == plain["exporters"].pop("kafka")
    assert secure == plain


def test_verdict_collector_never_writes_to_kafka() -> None:
    config = collector("verdicts.yaml")
    exported = {e for p in config["service"]["pipelines"].values() for e in p["exporters"]}
    assert exported
    assert not any(e.split("/")[0] == "kafka" for e in exported)
    # Not even a defined but unused exporter may name the spans topic.
    assert "otlp_spans" not in yaml.safe_dump(config)


def test_builder_manifest_has_the_components_the_configs_use() -> None:
    manifest = read_yaml(COLLECTOR / "builder-config.yaml")
    modules = " ".join(
        c["gomod"] for kind in ("receivers", "processors", "exporters") for c in manifest[kind]
    )
    for module in (
        "otlpreceiver",
        "kafkareceiver",
        "kafkaexporter",
        "fileexporter",
        "debugexporter",
    ):
        assert f"/{module} " in modules
    types = {"otlp": "otlpreceiver", "kafka": "kafkaexporter", "batch": "batchprocessor"}
    types |= {"otlp_grpc": "otlpexporter", "otlp_http": "otlphttpexporter"}
    types |= {"memory_limiter": "memorylimiterprocessor"}
    for name in COLLECTOR_CONFIGS:
        config = collector(name)
        for kind in ("receivers", "processors", "exporters"):
            for component in config[kind]:
                base = component.split("/")[0]
                module = types.get(base, f"{base}{kind[:-1]}")
                assert f"/{module} " in modules, f"{name}: {component} needs {module} in the build"
    versions = set(re.findall(r" (v[\d.]+)", modules))
    assert len(versions) == 1, "all components must come from one collector release"


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_otelcol_validates_config(name: str, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    env = {
        **os.environ,
        "KAFKA_BROKERS": "127.0.0.1:9092",
        "TRACING_BACKEND_ENDPOINT": "127.0.0.1:4317",
        "KAFKA_USERNAME": "otelcol",
        "KAFKA_PASSWORD": "not-a-secret",
        "KAFKA_CA_FILE": str(ca),
    }
    result = subprocess.run(
        [str(realparts.otelcol()), "validate", f"--config={COLLECTOR / name}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------ compose


def compose() -> dict[str, Any]:
    data: dict[str, Any] = read_yaml(DEPLOY / "compose.yaml")
    return data


def test_compose_names_the_services() -> None:
    services = set(compose()["services"])
    assert {
        "kafka",
        "otel-collector",
        "otel-collector-verdicts",
        "sidecar",
        "prometheus",
        "grafana",
    } <= services


def test_compose_bind_mounts_exist() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source}"


def test_compose_builds_the_sidecar_image_from_this_dockerfile() -> None:
    build = compose()["services"]["sidecar"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


def test_compose_wires_collectors_without_a_loop() -> None:
    services = compose()["services"]
    sidecar_env = services["sidecar"]["environment"]
    assert sidecar_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector-verdicts:4327"
    assert any("collector/agents.yaml" in v for v in services["otel-collector"]["volumes"])
    assert any(
        "collector/verdicts.yaml" in v for v in services["otel-collector-verdicts"]["volumes"]
    )


def test_compose_prometheus_uses_the_example_config() -> None:
    prometheus = compose()["services"]["prometheus"]
    assert "./prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    config = read_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "sidecar"
    assert job["static_configs"][0]["targets"] == ["sidecar:9464"]


# ------------------------------------------------------------------ scripts


@pytest.mark.parametrize("name", ["install-prometheus", "build-collector"])
def test_script_is_executable_bash(name: str) -> None:
    path = ROOT / "scripts" / name
    assert os.access(path, os.X_OK)
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ topics everywhere


def planned() -> list[TopicSpec]:
    """The topics of the shipped configuration (the image's and the base's config.yaml)."""
    return plan(Settings.model_validate(read_yaml(K8S_BASE / "config.yaml")))


def test_compose_creates_every_topic_the_service_uses() -> None:
    command = compose()["services"]["kafka-init"]["command"][0]
    (loop,) = re.findall(r"for spec in ([^;]+);", command)
    specs = dict(item.split(":") for item in loop.split())
    created = {*specs, *re.findall(r"--topic (\w[\w.]*) --partitions", command)}
    assert created == {s.name for s in planned()}
    assert specs["otlp_logs"] == specs["otlp_spans"]  # co-partitioned
    assert "--topic eval_conversations --partitions 6" in command
    assert specs["eval_turns"] == "6"
    assert "--config cleanup.policy=compact" in command


STRIMZI = DEPLOY / "k8s" / "strimzi"


def strimzi(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((STRIMZI / name).read_text(encoding="utf-8")) if d]


def test_strimzi_topics_are_the_topic_plan() -> None:
    topics = {d["spec"]["topicName"]: d["spec"] for d in strimzi("topics.yaml")}
    assert all(d["kind"] == "KafkaTopic" for d in strimzi("topics.yaml"))
    specs = planned()
    assert list(topics) == [s.name for s in specs]
    for s in specs:
        for key, value in s.configs.items():
            assert topics[s.name]["config"][key] == value, s.name
    for group in COPARTITIONED:
        counts = {topics[s.name]["partitions"] for s in specs if s.group == group}
        assert len(counts) == 1, group
    assert all(
        t["replicas"] == 3 and t["config"]["min.insync.replicas"] == 2 for t in topics.values()
    )


def test_strimzi_user_has_exactly_the_acls_the_service_needs() -> None:
    (user,) = strimzi("user.yaml")
    assert user["kind"] == "KafkaUser"
    assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
    acls = user["spec"]["authorization"]["acls"]
    topics = {
        a["resource"]["name"]: {o.upper() for o in a["operations"]}
        for a in acls
        if a["resource"]["type"] == "topic"
    }
    assert all(
        a["resource"]["patternType"] == "literal" for a in acls if a["resource"]["type"] == "topic"
    )
    assert topics == {s.name: {*s.operations, "DESCRIBE"} for s in planned()}
    groups = [a for a in acls if a["resource"]["type"] == "group"]
    group_id = Settings.model_validate(read_yaml(K8S_BASE / "config.yaml")).kafka.group_id
    assert groups == [
        {
            "resource": {"type": "group", "name": group_id, "patternType": "prefix"},
            "operations": ["Read"],
        }
    ]
    assert not [a for a in acls if a["resource"]["type"] not in ("topic", "group")]


def test_strimzi_kustomization_lists_its_files() -> None:
    kustomization = read_yaml(STRIMZI / "kustomization.yaml")
    assert set(kustomization["resources"]) == {
        p.name for p in STRIMZI.glob("*.yaml") if p.name != "kustomization.yaml"
    }
