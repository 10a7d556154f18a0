"""The three-node cluster that scripts/test starts is set up like production: replication 3
with min.insync.replicas 2, no topics made on demand, SASL/SCRAM over TLS with the brokers'
hostnames verified, ACLs enforced (nobody may do anything without one), and a rolling restart
under acks=all load loses no acknowledged record.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.conn import create_conn
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka.helpers import create_ssl_context

from tests.integration.cluster import (
    CLUSTER_RESOURCE,
    admin_client,
    cluster,
    create_topics,
    grant,
    restart_broker,
    revoke,
)

pytestmark = [pytest.mark.kafka]


async def send_one(user: str, topic: str, value: bytes = b"v", **options: object) -> None:
    producer = AIOKafkaProducer(acks="all", **cluster().client_kwargs(user), **options)
    try:
        await producer.start()
        await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()


async def read_one(user: str, topic: str, group: str | None) -> bytes:
    consumer = AIOKafkaConsumer(
        topic, group_id=group, auto_offset_reset="earliest", **cluster().client_kwargs(user)
    )
    try:
        await consumer.start()
        record = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    return bytes(record.value)


async def read_everything(topic: str) -> list[bytes]:
    """Every record of ``topic`` up to its current end, read as the admin (no group)."""
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **cluster().client_kwargs("admin"))
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(await partitions_of(topic))]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "could not read the topic back within 60 s"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(bytes(r.value) for r in records)
    finally:
        await consumer.stop()
    return values


async def partitions_of(topic: str) -> set[int]:
    async with admin_client() as admin:
        (described,) = await admin.describe_topics([topic])
    return {p["partition"] for p in described["partitions"]}


async def test_a_topic_has_three_replicas_all_in_sync(topic_prefix: str) -> None:
    topic = f"{topic_prefix}.rf"
    await create_topics([topic], partitions=3, replication_factor=3)
    async with admin_client() as admin:
        (described,) = await admin.describe_topics([topic])
        broker = ConfigResource(ConfigResourceType.BROKER, str(cluster().broker_ids[0]))
        (reply,) = await admin.describe_configs([broker])
    assert len(described["partitions"]) == 3
    for partition in described["partitions"]:
        assert sorted(partition["replicas"]) == [1, 2, 3]
        assert sorted(partition["isr"]) == [1, 2, 3]
    configs = {entry[0]: entry[1] for entry in reply.resources[0][4]}
    assert configs["default.replication.factor"] == "3"
    assert configs["min.insync.replicas"] == "2"
    assert configs["auto.create.topics.enable"] == "false"
    assert configs["offsets.topic.replication.factor"] == "3"
    assert configs["transaction.state.log.replication.factor"] == "3"


async def test_writing_needs_a_write_acl(topic_prefix: str) -> None:
    topic = f"{topic_prefix}.write"
    await create_topics([topic])
    with pytest.raises(TopicAuthorizationFailedError):
        await send_one("nobody", topic)
    with pytest.raises(TopicAuthorizationFailedError):
        await send_one("producer", topic)

    await grant("producer", "WRITE", "TOPIC", topic)
    await send_one("producer", topic, b"granted")
    with pytest.raises(TopicAuthorizationFailedError):
        await send_one("nobody", topic)

    await revoke("producer", "WRITE", "TOPIC", topic)
    with pytest.raises(TopicAuthorizationFailedError):
        await send_one("producer", topic)
    assert await read_everything(topic) == [b"granted"]


async def test_reading_needs_topic_and_group_acls(topic_prefix: str) -> None:
    topic, group = f"{topic_prefix}.read", f"{topic_prefix}.g"
    await create_topics([topic])
    await send_one("admin", topic, b"hello")
    with pytest.raises(TopicAuthorizationFailedError):
        await read_one("sidecar", topic, group)

    await grant("sidecar", "READ", "TOPIC", topic)
    with pytest.raises(GroupAuthorizationFailedError):
        await read_one("sidecar", topic, group)

    await grant("sidecar", "READ", "GROUP", f"{topic_prefix}.", pattern="PREFIXED")
    assert await read_one("sidecar", topic, group) == b"hello"
    with pytest.raises(TopicAuthorizationFailedError):
        await read_one("nobody", topic, None)


async def test_topics_are_not_created_on_demand(topic_prefix: str) -> None:
    missing = f"{topic_prefix}.missing"
    with pytest.raises(UnknownTopicOrPartitionError):  # even for a super user
        await send_one("admin", missing, request_timeout_ms=2000)
    async with admin_client() as admin:
        assert missing not in await admin.list_topics()
        (described,) = await admin.describe_topics([missing])
    assert described["error_code"] == UnknownTopicOrPartitionError.errno


async def test_a_wrong_password_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    kc = cluster()
    host, port = kc.bootstrap.split(",")[0].split(":")
    refused = (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512"
    )
    # A connection says why ...
    kwargs = kc.client_kwargs("sidecar", password="not-the-password")
    with pytest.raises(SaslAuthenticationFailed) as exc:
        await create_conn(
            host,
            int(port),
            security_protocol=kwargs["security_protocol"],
            ssl_context=kwargs["ssl_context"],
            sasl_mechanism=kwargs["sasl_mechanism"],
            sasl_plain_username=kwargs["sasl_plain_username"],
            sasl_plain_password=kwargs["sasl_plain_password"],
        )
    assert str(exc.value) == f"[Error 58] SaslAuthenticationFailed: {refused}"

    # ... a client only logs it for each broker and fails to bootstrap.
    producer = AIOKafkaProducer(**kwargs)
    try:
        with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
            await producer.start()
    finally:
        await producer.stop()
    assert refused in caplog.text

    # The right password works, with either SCRAM mechanism.
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        admin = AIOKafkaAdminClient(**kc.client_kwargs("sidecar", mechanism=mechanism))
        await admin.start()
        try:
            assert len((await admin.describe_cluster())["brokers"]) == 3
        finally:
            await admin.close()


async def test_the_brokers_certificates_are_verified() -> None:
    kc = cluster()
    port = kc.info["brokers"][0]["port"]

    def handshake(context: ssl.SSLContext, hostname: str) -> None:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=hostname),
        ):
            pass

    trusted = create_ssl_context(cafile=kc.ca_file)
    handshake(trusted, "127.0.0.1")
    handshake(trusted, "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(trusted, "kafka.example.com")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        handshake(ssl.create_default_context(), "127.0.0.1")  # the system CAs only


async def test_a_client_certificate_opens_the_mtls_listener(topic_prefix: str) -> None:
    kc = cluster()
    admin = AIOKafkaAdminClient(**kc.mtls_kwargs())
    await admin.start()
    try:
        assert len((await admin.describe_cluster())["brokers"]) == 3
    finally:
        await admin.close()
    # The certificate's CN is the principal: User:sidecar, who may not write here.
    topic = f"{topic_prefix}.mtls"
    await create_topics([topic])
    producer = AIOKafkaProducer(acks="all", **kc.mtls_kwargs())
    await producer.start()
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(topic, b"v")
    finally:
        await producer.stop()
    # Without a certificate the listener refuses the handshake.
    anonymous = AIOKafkaAdminClient(
        bootstrap_servers=kc.info["mtls_bootstrap"],
        security_protocol="SSL",
        ssl_context=create_ssl_context(cafile=kc.ca_file),
    )
    try:
        with pytest.raises(KafkaConnectionError):
            await anonymous.start()
    finally:
        await anonymous.close()


@pytest.mark.slow
async def test_a_rolling_restart_loses_no_acknowledged_record(topic_prefix: str) -> None:
    kc = cluster()
    topic = f"{topic_prefix}.rolling"
    await create_topics([topic])
    await grant("producer", "WRITE", "TOPIC", topic)
    await grant("producer", "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER_RESOURCE)
    producer = AIOKafkaProducer(
        acks="all", enable_idempotence=True, linger_ms=5, **kc.client_kwargs("producer")
    )
    await producer.start()
    acknowledged: list[bytes] = []
    done = asyncio.Event()

    async def keep_producing() -> None:
        n = 0
        while not done.is_set():
            batch = [f"r{n + k}".encode() for k in range(20)]
            sent = [await producer.send(topic, value) for value in batch]
            for value, future in zip(batch, sent, strict=True):
                await future
                acknowledged.append(value)
            n += len(batch)
            await asyncio.sleep(0.01)

    load = asyncio.create_task(keep_producing())
    try:
        for n in kc.broker_ids:
            before = len(acknowledged)
            await restart_broker(n)
            assert not load.done(), f"producing failed while broker {n} restarted"
            assert len(acknowledged) > before, f"nothing acknowledged while broker {n} restarted"
    finally:
        done.set()
        await load  # a failed send fails the test here
        await producer.stop()

    values = await read_everything(topic)
    assert len(values) == len(acknowledged)  # the idempotent producer wrote no duplicates
    assert set(values) == set(acknowledged)
    async with admin_client() as admin:
        (described,) = await admin.describe_topics([topic])
    assert all(sorted(p["isr"]) == [1, 2, 3] for p in described["partitions"])
    print(f"{len(acknowledged)} records acknowledged and read back across 3 restarts")
