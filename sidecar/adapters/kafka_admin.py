"""The Kafka admin client: describe and create the topics of :mod:`sidecar.topic_plan`.

Topics are described with a metadata request that never creates them (a broker with
``auto.create.topics.enable`` would otherwise make each one it is asked about).
Creation goes through the controller (CreateTopics); a topic that exists already is
left as it is, so creating is idempotent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.metadata import MetadataRequest

from sidecar.adapters.kafka_security import connect_error, security_options, start_client
from sidecar.errors import SourceError
from sidecar.settings import KafkaSettings
from sidecar.topic_plan import DEFAULT_REPLICATION, TopicSpec, TopicState

__all__ = ["Created", "admin", "broker_count", "create", "describe"]

_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29
_TOPIC_ALREADY_EXISTS = 36


@asynccontextmanager
async def admin(
    settings: KafkaSettings, timeout_s: float = 15.0
) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client with the service's security settings (SourceError if none)."""
    client = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.client_id}-admin",
        request_timeout_ms=int(timeout_s * 1000),
        **security_options(settings),
    )
    try:
        await asyncio.wait_for(start_client(client, settings), timeout_s)
    except TimeoutError:
        await client.close()
        raise SourceError(
            f"Kafka at {settings.bootstrap_servers} did not answer within {timeout_s:.0f} s; "
            "check kafka.bootstrap_servers (SIDECAR_KAFKA__BOOTSTRAP_SERVERS), the network "
            "and kafka.security_protocol"
        ) from None
    except SourceError:
        await client.close()
        raise
    try:
        yield client
    finally:
        await client.close()


async def describe(
    client: AIOKafkaAdminClient, settings: KafkaSettings, names: Sequence[str]
) -> dict[str, TopicState]:
    """Each topic's partition count, or ``missing``, or why the cluster will not say."""
    if not names:
        return {}
    try:
        reply = await client._send_request(
            MetadataRequest(list(names), allow_auto_topic_creation=False)
        )
    except KafkaError as exc:
        raise connect_error(settings, exc) from exc
    found: dict[str, TopicState] = {}
    for topic in reply.to_object()["topics"]:
        name, code = topic["topic"], topic["error_code"]
        if code == 0:
            found[name] = TopicState(partitions=len(topic["partitions"]))
        elif code == _UNKNOWN_TOPIC:
            found[name] = TopicState(error="missing")
        elif code == _TOPIC_AUTHORIZATION_FAILED:
            found[name] = TopicState(
                error="not authorised to DESCRIBE it; grant the principal an ACL (READ or WRITE "
                "implies DESCRIBE)"
            )
        else:
            found[name] = TopicState(error=f"{for_code(code).__name__}")
    return found


async def broker_count(client: AIOKafkaAdminClient) -> int:
    cluster = await client.describe_cluster()
    return len(cluster["brokers"])


@dataclass(frozen=True, slots=True)
class Created:
    spec: TopicSpec
    partitions: int
    replication: int
    outcome: str  # "created", "exists", or the error


async def create(
    client: AIOKafkaAdminClient, settings: KafkaSettings, specs: Sequence[TopicSpec]
) -> list[Created]:
    """Create the topics of ``specs`` that are missing; existing ones are left alone.

    A topic missing from a co-partition group whose other topic exists gets that
    topic's partition count, so the group stays co-partitioned.
    """
    found = await describe(client, settings, [s.name for s in specs])
    brokers = await broker_count(client)
    existing_counts = {
        s.group: found[s.name].partitions
        for s in specs
        if s.group is not None and found.get(s.name, TopicState()).partitions is not None
    }
    results: list[Created] = []
    to_make: list[tuple[TopicSpec, int, int]] = []
    for spec in specs:
        state = found.get(spec.name, TopicState(error="missing"))
        replication = spec.replication or min(DEFAULT_REPLICATION, max(brokers, 1))
        if state.error != "missing":
            results.append(
                Created(spec, state.partitions or 0, replication, state.error or "exists")
            )
            continue
        partitions = (
            existing_counts.get(spec.group, spec.partitions) if spec.group else spec.partitions
        )
        to_make.append((spec, partitions or spec.partitions, replication))
    if to_make:
        try:
            reply = await client.create_topics(
                [NewTopic(s.name, n, r, topic_configs=dict(s.configs)) for s, n, r in to_make]
            )
        except KafkaError as exc:
            raise connect_error(settings, exc) from exc
        codes = {
            entry[0]: (entry[1], entry[2] if len(entry) > 2 else "") for entry in reply.topic_errors
        }
        for spec, partitions, replication in to_make:
            code, message = codes.get(spec.name, (0, ""))
            if code == 0:
                outcome = "created"
            elif code == _TOPIC_ALREADY_EXISTS:
                outcome = "exists"
            else:
                outcome = f"{for_code(code).__name__}: {message or 'refused'}"
            results.append(Created(spec, partitions, replication, outcome))
    order = {s.name: i for i, s in enumerate(specs)}
    return sorted(results, key=lambda c: order[c.spec.name])
