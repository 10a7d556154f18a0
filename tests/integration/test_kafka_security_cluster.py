"""sidecar's own Kafka clients on the SASL_SSL cluster, configured only through its settings.

The settings are what a user writes: ``security_protocol: SASL_SSL``, the cluster's CA as
``kafka.ssl.ca_file``, SCRAM-SHA-512 with the password in a file. The user ``sidecar`` has
only the ACLs granted here, on a prefix of its own.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sidecar.adapters.kafka import KafkaLabelSource, KafkaSink
from sidecar.errors import SourceError
from sidecar.ports import OutRecord, RecordKind
from sidecar.settings import KafkaSettings
from tests.integration.cluster import cluster, create_topics, grant

pytestmark = [pytest.mark.kafka]


def settings_for(
    tmp_path: Path, user: str = "sidecar", password: str | None = None, **kafka: Any
) -> KafkaSettings:
    kc = cluster()
    secret = tmp_path / f"{user}.password"
    secret.write_text((kc.password(user) if password is None else password) + "\n")
    return KafkaSettings.model_validate(
        {
            "bootstrap_servers": kc.bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl": {"ca_file": kc.ca_file},
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": kc.info["users"][user]["username"],
            "sasl_password_file": str(secret),
            **kafka,
        }
    )


async def grant_prefix(prefix: str, user: str = "sidecar") -> None:
    for operation in ("READ", "WRITE", "DESCRIBE"):
        await grant(user, operation, "TOPIC", prefix, pattern="PREFIXED")
    await grant(user, "READ", "GROUP", prefix, pattern="PREFIXED")


async def test_settings_alone_connect_and_round_trip_a_record(tmp_path: Path) -> None:
    prefix = f"sec-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.labels"
    await create_topics([topic], partitions=1)
    await grant_prefix(prefix)
    settings = settings_for(tmp_path, group_id=prefix, client_id=prefix)
    sink = KafkaSink(settings)
    await sink.start()
    try:
        await sink.send([OutRecord(RecordKind.VERDICT, topic, b"k", b"over SASL_SSL")])
    finally:
        await sink.stop()
    reader = KafkaLabelSource(settings, topic)
    await reader.start()
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = await reader.fetch(timeout_ms=500)
        await reader.commit()
    finally:
        await reader.stop()
    assert got == [b"over SASL_SSL"]


async def test_a_ca_the_broker_was_not_signed_by_is_named_as_tls(tmp_path: Path) -> None:
    """The cluster's CA is not in the system store: the handshake fails, and says so."""
    settings = settings_for(tmp_path, ssl={"use_system_ca": True})
    sink = KafkaSink(settings)
    with pytest.raises(SourceError) as caught:
        await asyncio.wait_for(sink.start(), 60)
    await sink.stop()
    message = str(caught.value)
    assert message.startswith("TLS failed with Kafka at ")
    assert "kafka.ssl.ca_file" in message
    assert "bootstrap_servers" not in message


async def test_a_wrong_password_says_authentication_failed(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, password="not-the-password")
    for client in (KafkaSink(settings), KafkaLabelSource(settings, "any")):
        with pytest.raises(SourceError) as caught:
            await asyncio.wait_for(client.start(), 60)
        await client.stop()
        message = str(caught.value)
        assert message.startswith("authentication failed at Kafka at "), message
        assert "with SASL SCRAM-SHA-512" in message
        for field in ("kafka.sasl_mechanism", "kafka.sasl_username", "kafka.sasl_password"):
            assert field in message
        assert "bootstrap_servers" not in message
        assert "not-the-password" not in message


async def test_a_missing_acl_names_the_topic_then_the_group(tmp_path: Path) -> None:
    prefix = f"sec-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.labels"
    await create_topics([topic], partitions=1)
    admin = settings_for(tmp_path, user="admin")
    sink = KafkaSink(admin)
    await sink.start()
    await sink.send([OutRecord(RecordKind.VERDICT, topic, b"k", b"waited")])
    await sink.stop()
    settings = settings_for(tmp_path, group_id=prefix, client_id=prefix)
    user = cluster().info["users"]["sidecar"]["username"]
    refused = KafkaLabelSource(settings, topic)
    with pytest.raises(SourceError) as caught:
        await refused.start()
    await refused.stop()
    assert str(caught.value) == (
        f"not authorised to DESCRIBE topic {topic!r} (review.labels_topic) as User:{user}; "
        "grant that principal DESCRIBE on the topic (an ACL), or change review.labels_topic"
    )
    await grant("sidecar", "READ", "TOPIC", topic)  # READ implies DESCRIBE
    refused = KafkaLabelSource(settings, topic)
    with pytest.raises(SourceError) as caught:
        await refused.start()
    await refused.stop()
    assert str(caught.value) == (
        f"not authorised to READ group '{prefix}.labels' (kafka.group_id) as User:{user}; "
        "grant that principal READ on the group (an ACL), or change kafka.group_id"
    )
    await grant("sidecar", "READ", "GROUP", prefix, pattern="PREFIXED")
    reader = KafkaLabelSource(settings, topic)
    await reader.start()
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while not got:
            assert time.monotonic() < deadline, reader.access_refused
            got += await reader.fetch(timeout_ms=500)
        assert got == [b"waited"]
        assert reader.access_refused is None
    finally:
        await reader.stop()
