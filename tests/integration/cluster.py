"""The three-node Kafka cluster (TLS, SASL/SCRAM, ACLs) that scripts/test starts, for tests.

scripts/kafka/cluster.py starts it and describes it in ``STATE_DIR/cluster.json``;
scripts/test exports that directory as ``SIDECAR_TEST_CLUSTER``. A test that needs the
cluster and finds the variable unset fails (as with ``SIDECAR_TEST_KAFKA``): a skip would
hide a broken set-up. By hand::

    python3 scripts/kafka/cluster.py start /tmp/kc
    SIDECAR_TEST_CLUSTER=/tmp/kc .venv/bin/python -m pytest tests/integration/test_kafka_cluster.py
    python3 scripts/kafka/cluster.py stop /tmp/kc

Clients connect with SASL_SSL and SCRAM-SHA-512 (SCRAM-SHA-256 works too) as one of the
users ``admin`` (super user), ``sidecar``, ``producer`` and ``nobody``; only the admin has
any right until a test grants one (``grant``/``revoke``). The brokers' certificates are
checked against the cluster's CA, hostname included.

aiokafka's admin client has no ACL methods, so ``grant`` and ``revoke`` send the
CreateAcls/DeleteAcls requests of ``aiokafka.protocol.admin`` themselves (about 0.1 s,
where Kafka's ``org.apache.kafka.tools.AclCommand`` takes a JVM start, 3-4 s), then wait
until every broker's authorizer shows the change: brokers learn ACLs from the metadata
log a moment after the controller accepts them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code
from aiokafka.helpers import create_ssl_context
from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "kafka" / "cluster.py"
ENV = "SIDECAR_TEST_CLUSTER"

# Kafka's wire codes (org.apache.kafka.common.acl / resource).
OPERATIONS = {
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}
RESOURCE_TYPES = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
PATTERNS = {"LITERAL": 3, "PREFIXED": 4}
PERMISSIONS = {"DENY": 2, "ALLOW": 3}
CLUSTER_RESOURCE = "kafka-cluster"  # the name of the CLUSTER resource


@dataclass(frozen=True)
class Cluster:
    state: Path
    info: Mapping[str, Any]

    @property
    def bootstrap(self) -> str:
        return str(self.info["bootstrap"])

    @property
    def ca_file(self) -> str:
        return str(self.info["ca_file"])

    @property
    def broker_ids(self) -> list[int]:
        return [int(b["id"]) for b in self.info["brokers"]]

    def password(self, user: str) -> str:
        return str(self.info["users"][user]["password"])

    def client_kwargs(
        self, user: str, *, password: str | None = None, mechanism: str | None = None
    ) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin) as ``user``."""
        account = self.info["users"][user]
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism or self.info["mechanism"],
            "sasl_plain_username": account["username"],
            "sasl_plain_password": account["password"] if password is None else password,
            # Verifies the broker's certificate and that it names 127.0.0.1 (check_hostname).
            "ssl_context": create_ssl_context(cafile=self.ca_file),
        }

    def mtls_kwargs(self) -> dict[str, Any]:
        """aiokafka keyword arguments for the MTLS listener with the client certificate
        (principal ``self.info['client_principal']``, User:sidecar)."""
        if "client_cert" not in self.info:
            # Not a broken set-up: without openssl the certificates come from keytool, which
            # cannot hand a private key to Python.
            pytest.skip("this cluster has no client certificate (made with keytool, no openssl)")
        return {
            "bootstrap_servers": self.info["mtls_bootstrap"],
            "security_protocol": "SSL",
            "ssl_context": create_ssl_context(
                cafile=self.ca_file,
                certfile=self.info["client_cert"],
                keyfile=self.info["client_key"],
            ),
        }


def cluster() -> Cluster:
    """The running cluster; fails the test when there is none."""
    state = os.environ.get(ENV)
    if not state:
        pytest.fail(
            f"no Kafka cluster ({ENV} is unset): run the suite with scripts/test, which starts "
            "one, or start it by hand with `python3 scripts/kafka/cluster.py start DIR` "
            f"and set {ENV}=DIR",
            pytrace=False,
        )
    described = Path(state) / "cluster.json"
    if not described.is_file():
        pytest.fail(f"{ENV}={state} holds no cluster.json: is the cluster running?", pytrace=False)
    return Cluster(Path(state), json.loads(described.read_text()))


def client_kwargs(user: str, **options: Any) -> dict[str, Any]:
    return cluster().client_kwargs(user, **options)


def principal(user: str) -> str:
    """``User:NAME`` for a user of cluster.json (or a principal already spelled so)."""
    if ":" in user:
        return user
    info = cluster().info
    name = info["users"][user]["username"] if user in info["users"] else user
    return f"User:{name}"


@asynccontextmanager
async def admin_client(user: str = "admin") -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(**client_kwargs(user))
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def create_topics(
    names: Iterable[str],
    partitions: int = 3,
    replication_factor: int = 3,
    configs: Mapping[str, str] | None = None,
    *,
    within: float = 30.0,
) -> None:
    """Create topics as the admin and wait until every partition has a leader and a full ISR."""
    names = list(names)
    async with admin_client() as admin:
        await admin.create_topics(
            [
                NewTopic(n, partitions, replication_factor, topic_configs=dict(configs or {}))
                for n in names
            ]
        )
        deadline = time.monotonic() + within
        while True:
            topics = await admin.describe_topics(names)
            settled = all(
                t["error_code"] == 0
                and len(t["partitions"]) == partitions
                and all(
                    p["leader"] >= 0 and len(p["isr"]) == replication_factor
                    for p in t["partitions"]
                )
                for t in topics
            )
            if settled:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"topics not settled after {within} s: {topics}")
            await asyncio.sleep(0.2)


def _binding(
    user: str,
    operation: str,
    resource_type: str,
    name: str,
    pattern: str,
    host: str,
    permission: str,
) -> tuple[int, str, int, str, str, int, int]:
    return (
        RESOURCE_TYPES[resource_type.upper()],
        name,
        PATTERNS[pattern.upper()],
        principal(user),
        host,
        OPERATIONS[operation.upper()],
        PERMISSIONS[permission.upper()],
    )


async def _until_every_broker(
    admin: AIOKafkaAdminClient, binding: tuple[Any, ...], present: bool, within: float = 30.0
) -> None:
    deadline = time.monotonic() + within
    pending = set(cluster().broker_ids)
    while pending:
        for node in sorted(pending):
            reply = await admin._send_request_to_node(node, DescribeAclsRequest(*binding))
            if reply.error_code:
                raise for_code(reply.error_code)(reply.error_message)
            if bool(reply.resources) == present:
                pending.discard(node)
        if pending and time.monotonic() > deadline:
            raise AssertionError(
                f"brokers {sorted(pending)} still {'lack' if present else 'have'} {binding}"
            )
        if pending:
            await asyncio.sleep(0.05)


async def grant(
    user: str,
    operation: str,
    resource_type: str,
    name: str,
    pattern: str = "LITERAL",
    *,
    host: str = "*",
    permission: str = "ALLOW",
) -> None:
    """Add an ACL (e.g. ``grant("producer", "WRITE", "TOPIC", topic)``) and wait until every
    broker enforces it. ``user`` is a cluster.json user or a principal (``User:x``)."""
    binding = _binding(user, operation, resource_type, name, pattern, host, permission)
    async with admin_client() as admin:
        reply = await admin._send_request(CreateAclsRequest(*binding))
        for code, message in reply.creation_responses:
            if code:
                raise for_code(code)(message)
        await _until_every_broker(admin, binding, present=True)


async def revoke(
    user: str,
    operation: str,
    resource_type: str,
    name: str,
    pattern: str = "LITERAL",
    *,
    host: str = "*",
    permission: str = "ALLOW",
) -> None:
    """Remove an ACL that ``grant`` added and wait until no broker enforces it any more."""
    binding = _binding(user, operation, resource_type, name, pattern, host, permission)
    async with admin_client() as admin:
        reply = await admin._send_request(DeleteAclsRequest(*binding))
        for result in reply.filter_responses:
            if result[0]:
                raise for_code(result[0])(result[1])
        await _until_every_broker(admin, binding, present=False)


async def restart_broker(n: int, *, within: float = 300.0) -> Cluster:
    """``cluster.py restart-broker``: node ``n`` stops cleanly, starts again and is back in the
    ISR of its partitions when this returns; the cluster as described afterwards (new pid)."""
    state = cluster().state
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "restart-broker",
        str(state),
        str(n),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"restart-broker {n} did not finish within {within} s") from None
    report = (out + err).decode(errors="replace").strip()
    if proc.returncode != 0:
        raise AssertionError(f"restart-broker {n} failed ({proc.returncode}):\n{report}")
    print(report)
    return cluster()
