"""Service configuration: a YAML file, a secrets directory and ``SIDECAR_`` environment variables.

Four sources, the first that sets a field winning:

1. arguments given in code (``Settings(kafka=...)``);
2. ``SIDECAR_*`` environment variables, nested fields joined by ``__``
   (``SIDECAR_KAFKA__BOOTSTRAP_SERVERS=broker:9092``);
3. the secrets directory named by ``SIDECAR_SECRETS_DIR`` (a mounted Kubernetes
   secret): one file per field, named like its variable
   (``sidecar_kafka__sasl_password``, any case), holding the value (a final
   newline is dropped);
4. the YAML file (``--config``), read with the same bounds as rubric files
   (:mod:`sidecar.safe_yaml`).

Sections merge field by field across sources. Any problem is raised as one
:class:`~sidecar.errors.ConfigError` naming every bad field.

Bounded work lives in the judge section: ``judge.max_block_chars`` (each data
block shown to the judge, default 32768 characters, at most 262144) and
``judge.max_answer_bytes`` (the judge's HTTP answer, default 262144 bytes).

``redaction`` says what the verdict and review records keep of the content
(:mod:`sidecar.wire.redaction`): ``content`` keep, hash or drop, and the ``patterns``
masked in kept text (default ``[email, card_number]``). A pattern that is
unknown or does not compile under RE2 is a configuration error naming it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from sidecar.errors import ConfigError
from sidecar.judge.config import JudgeSettings
from sidecar.logs import LogFormat, level_of
from sidecar.safe_yaml import YamlLimitError
from sidecar.safe_yaml import describe as describe_yaml
from sidecar.safe_yaml import load as load_yaml
from sidecar.wire.redaction import DEFAULT_PATTERNS, Content, PatternError, Redaction, masker


class _Section(BaseModel):
    # Infinite or NaN numbers are refused: no setting means "for ever" that way.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DeliverySettings(_Section):
    """How records are produced until acknowledged (:mod:`sidecar.engine.deliver`).

    Retries back off from ``backoff_s`` doubling to ``backoff_max_s``, each
    delay shortened by up to ``jitter`` (a share, 0 to 1) at random. A record
    refused until an operator acts (not authorised, no such topic) is retried
    for ``operator_wait_s``, one the topic refuses as it is (too large,
    invalid) for ``never_wait_s``; then it is dead-lettered. A dead letter
    larger than ``max_dead_letter_bytes`` goes without its value.
    """

    backoff_s: Annotated[float, Field(gt=0)] = 0.5
    backoff_max_s: Annotated[float, Field(gt=0)] = 30.0
    jitter: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2
    operator_wait_s: Annotated[float, Field(ge=0)] = 900.0
    never_wait_s: Annotated[float, Field(ge=0)] = 60.0
    max_dead_letter_bytes: Annotated[int, Field(ge=0)] = 900_000


class _SecretSection(_Section):
    # A validation error never shows the input: it may hold a password.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)


class KafkaSslSettings(_SecretSection):
    """TLS for the Kafka clients (``security_protocol`` SSL or SASL_SSL).

    The brokers' certificates are checked against ``ca_file`` (PEM), or the
    system's store when ``use_system_ca`` is true (managed clusters with public
    certificates); ``check_hostname`` stays on unless turned off. ``cert_file``
    and ``key_file`` (PEM) are the client's own certificate for mutual TLS; an
    encrypted key's password is ``key_password`` or ``key_password_file``.
    """

    ca_file: Path | None = None
    use_system_ca: bool = False
    cert_file: Path | None = None
    key_file: Path | None = None
    key_password: SecretStr | None = None
    key_password_file: Path | None = None
    check_hostname: bool = True

    def in_use(self) -> list[str]:
        """The fields set away from their defaults (``kafka.ssl.NAME``)."""
        return [
            f"kafka.ssl.{name}"
            for name in ("ca_file", "cert_file", "key_file", "key_password", "key_password_file")
            if getattr(self, name) is not None
        ] + (["kafka.ssl.use_system_ca"] if self.use_system_ca else [])


def _unreadable(path: Path | None, field: str) -> str | None:
    if path is None:
        return None
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return f"{field}: cannot read {str(path)!r} ({exc.strerror or type(exc).__name__})"
    return None


def security_problems(kafka: KafkaSettings) -> list[str]:
    """Every bad combination of the security settings, each naming its fields (no values)."""
    problems: list[str] = []
    protocol = kafka.security_protocol
    tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")
    ssl = kafka.ssl
    if tls and ssl.ca_file is None and not ssl.use_system_ca:
        problems.append(
            f"kafka.security_protocol {protocol} needs kafka.ssl.ca_file (the CA that signed the "
            "brokers' certificates) or kafka.ssl.use_system_ca: true"
        )
    if not tls and (fields := ssl.in_use()):
        problems.append(
            f"{', '.join(fields)} set but kafka.security_protocol is {protocol}; "
            "use SSL or SASL_SSL, or remove them"
        )
    if ssl.key_file is not None and ssl.cert_file is None:
        problems.append("kafka.ssl.key_file needs kafka.ssl.cert_file (the client certificate)")
    if ssl.key_password is not None and ssl.key_password_file is not None:
        problems.append("kafka.ssl.key_password and kafka.ssl.key_password_file: set only one")
    if sasl and kafka.sasl_mechanism is None:
        problems.append(
            f"kafka.security_protocol {protocol} needs kafka.sasl_mechanism "
            "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)"
        )
    sasl_fields = [
        f"kafka.{name}"
        for name in (
            "sasl_mechanism",
            "sasl_username",
            "sasl_password",
            "sasl_password_file",
            "sasl_oauth_token_provider",
        )
        if getattr(kafka, name) is not None
    ]
    if not sasl and sasl_fields:
        problems.append(
            f"{', '.join(sasl_fields)} set but kafka.security_protocol is {protocol}; "
            "use SASL_SSL or SASL_PLAINTEXT, or remove them"
        )
    if kafka.sasl_password is not None and kafka.sasl_password_file is not None:
        problems.append("kafka.sasl_password and kafka.sasl_password_file: set only one")
    mechanism = kafka.sasl_mechanism
    if sasl and mechanism == "OAUTHBEARER":
        spec = kafka.sasl_oauth_token_provider
        if spec is None:
            problems.append(
                "kafka.sasl_mechanism OAUTHBEARER needs kafka.sasl_oauth_token_provider "
                "('module:attr' of a token provider factory)"
            )
        elif spec.count(":") != 1 or not all(part.strip() for part in spec.split(":")):
            problems.append(
                "kafka.sasl_oauth_token_provider: expected 'module:attr' "
                "(e.g. 'mycompany.kafka_auth:provider')"
            )
    elif sasl and mechanism is not None:
        if not kafka.sasl_username:
            problems.append(f"kafka.sasl_mechanism {mechanism} needs kafka.sasl_username")
        if kafka.sasl_password is None and kafka.sasl_password_file is None:
            problems.append(
                f"kafka.sasl_mechanism {mechanism} needs kafka.sasl_password "
                "(SIDECAR_KAFKA__SASL_PASSWORD) or kafka.sasl_password_file"
            )
        if kafka.sasl_oauth_token_provider is not None:
            problems.append(
                "kafka.sasl_oauth_token_provider is only for kafka.sasl_mechanism OAUTHBEARER"
            )
    for path, field in (
        (ssl.ca_file, "kafka.ssl.ca_file"),
        (ssl.cert_file, "kafka.ssl.cert_file"),
        (ssl.key_file, "kafka.ssl.key_file"),
        (ssl.key_password_file, "kafka.ssl.key_password_file"),
        (kafka.sasl_password_file, "kafka.sasl_password_file"),
    ):
        if (problem := _unreadable(path, field)) is not None:
            problems.append(problem)
    return problems


class KafkaSettings(_SecretSection):
    """Where the brokers are, the topics, and how every client connects (security).

    ``security_protocol`` with ``ssl`` (TLS: ``ca_file`` or ``use_system_ca``,
    optional client certificate) and the SASL fields (``sasl_mechanism``,
    ``sasl_username``, ``sasl_password`` or ``sasl_password_file``, or
    ``sasl_oauth_token_provider`` for OAUTHBEARER) apply to every client: the
    consumers, the producer, the admin client, backfill and every worker.
    Secrets are :class:`~pydantic.SecretStr` (never shown); ``*_file`` fields
    name a file holding the secret (a mounted Kubernetes secret), read when a
    client connects. :func:`security_problems` lists bad combinations.
    """

    bootstrap_servers: str = "localhost:9092"
    topic: str = "otlp_spans"
    # The second input (GenAI content as events); co-partitioned with `topic`. "" or null: off.
    logs_topic: str | None = "otlp_logs"
    group_id: str = "sidecar"
    client_id: str = "sidecar"
    encoding: Literal["auto", "otlp_proto", "otlp_json"] = "auto"
    dead_letter_topic: str = "otlp_spans.dlq"
    verdict_topic: str = "eval_verdicts"  # empty string disables verdict records
    backfill_verdict_topic: str = "eval_verdicts_backfill"  # sidecar backfill writes here
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    ssl: KafkaSslSettings = Field(default_factory=lambda: KafkaSslSettings())
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    # OAUTHBEARER: "module:attr", a callable returning an aiokafka AbstractTokenProvider.
    sasl_oauth_token_provider: str | None = None
    max_poll_records: Annotated[int, Field(ge=1)] = 500
    fetch_timeout_ms: Annotated[int, Field(ge=10)] = 200
    commit_interval_s: Annotated[float, Field(gt=0)] = 2.0
    session_timeout_ms: Annotated[int, Field(ge=1000)] = 10_000
    heartbeat_interval_ms: Annotated[int, Field(ge=100)] = 3_000
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    # With --workers: how long a member waits (reading nothing) for its fair share of partitions.
    fair_share_wait_s: Annotated[float, Field(ge=0)] = 10.0

    @field_validator("bootstrap_servers")
    @classmethod
    def _addresses(cls, value: str) -> str:
        problems = bootstrap_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _security_fits(self) -> KafkaSettings:
        problems = security_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class AssemblerSettings(_Section):
    # A day and a week: the waits add to trace times, which must stay dates.
    decision_wait_s: Annotated[float, Field(ge=0, le=86_400)] = 5.0
    max_trace_age_s: Annotated[float, Field(gt=0, le=7 * 86_400)] = 120.0
    max_open_traces: Annotated[int, Field(ge=1)] = 50_000
    max_spans_per_trace: Annotated[int, Field(ge=1)] = 2_000
    decided_memory: Annotated[int, Field(ge=1)] = 200_000


class MetricsSettings(_Section):
    host: str = "0.0.0.0"
    port: Annotated[int, Field(ge=0, le=65535)] = 9464
    max_agents: Annotated[int, Field(ge=1)] = 50
    # One deadline per connection for the whole request and answer (slow clients closed).
    request_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    # Connections served at once; one more is answered 503 and closed unread.
    max_connections: Annotated[int, Field(ge=1)] = 64


class SamplingSettings(_Section):
    budget_per_minute: Annotated[int, Field(ge=0)] | None = None
    budget_per_day: Annotated[int, Field(ge=0)] | None = None
    warmup_traces: Annotated[int, Field(ge=0)] = 0


class ReviewSettings(_Section):
    """Human review loop: cases out on ``topic``, labels back on ``labels_topic``."""

    enabled: bool = True
    topic: str = "eval_review"
    labels_topic: str = "eval_labels"
    audit_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.01
    error_share: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    window: Annotated[int, Field(ge=1)] = 200
    memory: Annotated[int, Field(ge=1)] = 50_000


class RedactionSettings(_Section):
    """Content in the verdict and review records: kept with patterns masked, hashed or dropped."""

    content: Content = Content.KEEP
    patterns: tuple[str, ...] = DEFAULT_PATTERNS

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for index, pattern in enumerate(patterns):
            try:
                masker(pattern)
            except PatternError as exc:
                raise ValueError(f"patterns[{index}]: {exc}") from exc
        return patterns

    def policy(self) -> Redaction:
        return Redaction.build(self.content, self.patterns)


class ConversationSettings(_Section):
    """The conversation stage (:mod:`sidecar.conversation`).

    It runs in ``sidecar run`` when enabled and some rubric has
    ``scope: conversation``. Its consumer group is ``group_id`` (default
    ``<kafka.group_id>.conversations``); more replicas share its partitions.

    Decided conversations survive restarts and rebalances on ``state_topic``
    (compacted, co-partitioned with ``topic``; ``null`` or ``""`` turns it
    off): at most ``max_known_per_partition`` per partition, least recently
    decided evicted first. A late turn re-reads at most ``max_reread_turns``
    earlier turns from ``topic`` (the most recent), within ``reread_timeout_s``.
    """

    enabled: bool = True
    topic: str = "eval_turns"
    group_id: str | None = None
    max_open_conversations: Annotated[int, Field(ge=1)] = 100_000
    decided_memory: Annotated[int, Field(ge=1)] = 10_000
    max_inflight: Annotated[int, Field(ge=1)] = 200
    state_topic: str | None = "eval_conversations"
    max_known_per_partition: Annotated[int, Field(ge=1)] = 50_000
    max_reread_turns: Annotated[int, Field(ge=1, le=10_000)] = 1_000
    reread_timeout_s: Annotated[float, Field(gt=0)] = 10.0


class DriftSectionSettings(_Section):
    """The drift detectors of :mod:`sidecar.drift.attribute` (``sidecar run`` and ``sidecar drift``).

    ``alpha`` is each detector's false-alarm level (it alarms at an e-value of
    ``2 / alpha``). The first ``baseline`` verdicts of each stream set its
    reference; a new bettor joins every ``every`` verdicts after it. The
    canaries' judge stream has its own ``canary_baseline`` and
    ``canary_every``. An agent alarm waits ``guard_s`` seconds for a judge
    alarm before it is the agent's. ``tolerance`` is subtracted from each
    reference (moves smaller than it are not alarmed). At most
    ``max_streams`` streams are watched; a stream fed nothing for a week is
    retired, and while the bound is full the results of further streams are
    left out and counted (``sidecar.drift.attribute.DriftMonitor``).
    """

    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.01
    guard_s: Annotated[float, Field(ge=0)] = 6 * 3600.0
    baseline: Annotated[int, Field(ge=2)] = 1000
    every: Annotated[int, Field(ge=1)] = 500
    canary_baseline: Annotated[int, Field(ge=2)] = 400
    canary_every: Annotated[int, Field(ge=1)] = 100
    tolerance: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    max_streams: Annotated[int, Field(ge=1)] = 500


class OtelSettings(_Section):
    # Verdict spans go out as the standard OTEL_* variables say (sidecar.adapters.otel).
    enabled: bool = True
    service_name: str = "sidecar"
    shutdown_timeout_s: Annotated[float, Field(gt=0)] = 5.0  # bounds flush and shutdown


class LogSettings(_Section):
    # ``sidecar run --log-level`` and ``--log-format`` override these (sidecar.logs).
    level: str = "info"
    format: LogFormat = "text"

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level_of(value)  # ValueError naming the levels
        return value.lower()


class Settings(BaseSettings):
    """Everything ``sidecar run`` needs; every field has a production default."""

    model_config = SettingsConfigDict(
        env_prefix="SIDECAR_",
        env_nested_delimiter="__",
        extra="forbid",
        allow_inf_nan=False,
        nested_model_default_partial_update=True,
        hide_input_in_errors=True,  # an input may be a password
    )

    rubrics_dir: Path = Path("rubrics")
    # Where rubrics' canary files may be (unset: inside rubrics_dir only).
    canary_root: Path | None = None
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    assembler: AssemblerSettings = Field(default_factory=AssemblerSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    otel: OtelSettings = Field(default_factory=OtelSettings)
    review: ReviewSettings = Field(default_factory=ReviewSettings)
    redaction: RedactionSettings = Field(default_factory=RedactionSettings)
    conversations: ConversationSettings = Field(default_factory=ConversationSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    drift: DriftSectionSettings = Field(default_factory=DriftSectionSettings)
    max_inflight_traces: Annotated[int, Field(ge=1)] = 2_000
    # Service processes in one consumer group (``sidecar run --workers`` overrides it).
    workers: Annotated[int, Field(ge=1, le=256)] = 1
    shutdown_timeout_s: Annotated[float, Field(gt=0)] = 20.0
    # Idempotency keys of recent verdicts remembered, to count redelivered ones.
    emitted_memory: Annotated[int, Field(ge=1)] = 100_000

    @model_validator(mode="after")
    def _topics_differ(self) -> Settings:
        check_topics(self)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            _SecretsDirSource(settings_cls),
            _FileSource(settings_cls),
        )


# What load_settings read from the YAML file, for the one Settings() it builds.
_file_data: ContextVar[dict[str, Any] | None] = ContextVar("sidecar_settings_file", default=None)

SECRETS_DIR_VARIABLE = "SIDECAR_SECRETS_DIR"
_SECRET_PREFIX = "sidecar_"
_MAX_SECRET_BYTES = 1 << 20


class _WholeSource(PydanticBaseSettingsSource):
    """A source that gives all its settings at once, as one nested mapping (``__call__``)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # never asked field by field: __call__ is overridden


class _FileSource(_WholeSource):
    """The YAML file's settings, as :func:`load_settings` parsed them (lowest precedence)."""

    def __call__(self) -> dict[str, Any]:
        return dict(_file_data.get() or {})


class _SecretsDirSource(_WholeSource):
    """Files of ``$SIDECAR_SECRETS_DIR`` named ``sidecar_<field>[__<field>...]``, one value each."""

    def __call__(self) -> dict[str, Any]:
        directory = os.environ.get(SECRETS_DIR_VARIABLE)
        return read_secrets_dir(Path(directory)) if directory else {}


def read_secrets_dir(directory: Path) -> dict[str, Any]:
    """Nested settings from the files of ``directory``; ConfigError when it cannot be read."""
    if not directory.is_dir():
        raise ConfigError(
            f"{SECRETS_DIR_VARIABLE}={directory} is not a directory; "
            "point it at the mounted secret or unset it"
        )
    found: dict[str, Any] = {}
    for entry in sorted(directory.iterdir()):
        name = entry.name.lower()
        # Kubernetes mounts keep their files behind "..data" links; only the visible names count.
        if not name.startswith(_SECRET_PREFIX) or not entry.is_file():
            continue
        try:
            with entry.open("rb") as handle:
                raw = handle.read(_MAX_SECRET_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{entry}: cannot read secret: {exc.strerror}") from exc
        if len(raw) > _MAX_SECRET_BYTES:
            raise ConfigError(f"{entry}: secret larger than {_MAX_SECRET_BYTES} bytes")
        try:
            value = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{entry}: secret is not UTF-8 text") from exc
        path = name[len(_SECRET_PREFIX) :].split("__")
        if not all(path):
            continue
        branch = found
        for key in path[:-1]:
            nested = branch.setdefault(key, {})
            if not isinstance(nested, dict):
                break
            branch = nested
        else:
            branch[path[-1]] = value
    return found


def topics_in_use(settings: Settings) -> list[tuple[str, str]]:
    """Every Kafka topic the service reads or writes, as (field, topic); off ones left out."""
    kafka, review, turns = settings.kafka, settings.review, settings.conversations
    named: list[tuple[str, str | None]] = [
        ("kafka.topic", kafka.topic),
        ("kafka.logs_topic", kafka.logs_topic),
        ("kafka.dead_letter_topic", kafka.dead_letter_topic),
        ("kafka.verdict_topic", kafka.verdict_topic),
        ("kafka.backfill_verdict_topic", kafka.backfill_verdict_topic),
    ]
    if review.enabled:
        named += [("review.topic", review.topic), ("review.labels_topic", review.labels_topic)]
    if turns.enabled:
        named += [
            ("conversations.topic", turns.topic),
            ("conversations.state_topic", turns.state_topic),
        ]
    return [(field, topic.strip()) for field, topic in named if topic and topic.strip()]


def bootstrap_problems(value: str) -> list[str]:
    """What is wrong with a ``host:port,host:port`` broker list (nothing: an empty list)."""
    if not value.strip():
        return ["no broker given; write host:port (several separated by commas)"]
    problems = []
    for entry in value.split(","):
        address = entry.strip()
        host, colon, port = address.rpartition(":")
        if not colon:
            host, port = address, ""  # the client's default port
        if not host or host == "[]" or any(c.isspace() for c in address):
            problems.append(f"{entry!r} is not host:port")
        elif port and not (port.isdigit() and 1 <= int(port) <= 65535):
            problems.append(f"{entry!r}: the port must be a number from 1 to 65535")
    return problems


# Kafka's own rule for topic names.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_topics(settings: Settings) -> None:
    """Refuse two roles on one topic (a dead-letter topic equal to the input loops forever).

    Each topic the service reads or writes has one role, and a name Kafka
    accepts; raises ``ValueError`` naming the field at fault (the first two
    fields that share a topic).
    """
    if not settings.kafka.topic.strip():
        raise ValueError("kafka.topic is empty; name the topic the spans arrive on")
    seen: dict[str, str] = {}
    for field, topic in topics_in_use(settings):
        if _TOPIC_NAME.fullmatch(topic) is None or topic in (".", ".."):
            raise ValueError(
                f"{field} {topic!r} is not a Kafka topic name; use 1 to 249 letters, "
                "digits, '.', '_' or '-'"
            )
        if topic in seen:
            raise ValueError(
                f"{seen[topic]} and {field} are both {topic!r}; give each its own topic"
            )
        seen[topic] = field


def conversation_group(kafka: KafkaSettings, conversations: ConversationSettings) -> str:
    """The conversation stage's consumer group (``conversations.group_id``, else derived)."""
    return conversations.group_id or f"{kafka.group_id}.conversations"


@contextmanager
def _reading(data: dict[str, Any]) -> Iterator[None]:
    token = _file_data.set(data)
    try:
        yield
    finally:
        _file_data.reset(token)


def load_settings(path: Path | None = None) -> Settings:
    """Read the YAML file (if any), the secrets directory and the environment.

    Raises ConfigError on any problem, naming every bad field.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = load_yaml(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read configuration: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}: not UTF-8 text (byte {exc.start}); save the configuration as UTF-8"
            ) from exc
        except YamlLimitError as exc:
            raise ConfigError(f"{path}: configuration refused: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {describe_yaml(exc)}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of settings at the top level")
        data = {str(k): v for k, v in loaded.items()}
    source = str(path) if path is not None else "environment"
    try:
        with _reading(data):
            return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: "
            + str(err.get("ctx", {}).get("error", err["msg"]))
            for err in exc.errors()
        )
        raise ConfigError(
            f"invalid configuration ({source}; SIDECAR_* variables and "
            f"${SECRETS_DIR_VARIABLE} override the file): {problems}"
        ) from exc
    except SettingsError as exc:
        # A variable for a list or a section that is not JSON (pydantic-settings parses it).
        raise ConfigError(
            f"invalid configuration: {exc}; a SIDECAR_* variable for a list or a whole "
            "section must hold JSON, e.g. SIDECAR_REDACTION__PATTERNS='[\"email\"]' "
            "(or set one field of a section: SIDECAR_KAFKA__TOPIC=spans)"
        ) from exc
