#!/usr/bin/env python3
"""Start and stop a three-node Apache Kafka cluster (KRaft) on loopback for the tests, set up
the way a production cluster is: TLS everywhere, SASL/SCRAM for clients, ACLs, replication 3.

Test infrastructure only. It runs the same Kafka jars as scripts/kafka/broker.py (resolved
from Maven Central into ~/.cache/sidecar/kafka-<version>/libs) with the machine's Java 17.

    cluster.py start STATE_DIR [--brokers 3]  # once ready: STATE_DIR/cluster.json describes it
    cluster.py stop STATE_DIR                 # every node, also after a failed start
    cluster.py restart-broker STATE_DIR N     # stop node N cleanly, start it again and wait
                                              # until it is back in the ISR of its partitions

Each node is a combined broker + KRaft controller (a quorum of three voters): three JVMs
instead of six on a 2-core CI machine, and a rolling restart still keeps a controller
majority. Every node listens on four loopback ports chosen at start:

    CLIENT      SASL_SSL  SCRAM-SHA-512 and SCRAM-SHA-256; the broker's certificate only
    MTLS        SSL       clients with a certificate (ssl.client.auth=required)
    INTERNAL    SSL       replication between the brokers, certificates both ways
    CONTROLLER  SSL       the KRaft quorum and broker registration, certificates both ways

The nodes authenticate each other with their certificates rather than SCRAM: KRaft
controllers cannot take SCRAM (its credentials live in the metadata log they serve), and
PLAINTEXT would make whoever reaches those ports a super user. Each node's certificate
(CN=broker-N, SAN IP:127.0.0.1 and DNS:localhost, so clients verify hostnames) is signed by
a CA made at start in STATE_DIR/pki with openssl, else with Java's keytool (no client
certificate then; SIDECAR_CLUSTER_PKI=keytool forces it).

Principals: the SCRAM user name on CLIENT, the certificate's CN on the others (User:broker-N
for the nodes, User:sidecar for the client certificate). Authorizer: StandardAuthorizer with
allow.everyone.if.no.acl.found=false; super users: User:admin and the node principals. The
SCRAM users admin, sidecar, producer and nobody (random passwords in cluster.json) are
written into the metadata log when the storage is formatted, so they exist before any node
serves a client; none but admin may do anything until granted an ACL.

STATE_DIR/admin.properties holds the admin's client settings for Kafka's own tools, e.g.
``java -cp "$LIBS/*" org.apache.kafka.tools.AclCommand --bootstrap-server HOST:PORT
--command-config STATE_DIR/admin.properties --list``.

Everything it says goes to stderr, all that Kafka prints to STATE_DIR/node-N/*.log; stdout
stays empty.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from broker import LIBS, VERSION, java, resolve  # scripts/kafka/broker.py, next to this file

USERS = ("admin", "sidecar", "producer", "nobody")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
CLIENT_CN = "sidecar"  # the mTLS client certificate authenticates as User:sidecar
START_TIMEOUT = 180.0
# `stop` throws the cluster away: the last nodes to go cannot finish a controlled shutdown
# (no controller quorum is left), so what lingers is killed.
STOP_TIMEOUT = 8.0
RESTART_STOP_TIMEOUT = 120.0  # `restart-broker` waits for a controlled shutdown
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # the nodes this command started

LOG4J = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p [%t] %c: %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.BrokerServer
logger.server.level = info
logger.controller.name = kafka.server.ControllerServer
logger.controller.level = info
logger.raftserver.name = kafka.server.KafkaRaftServer
logger.raftserver.level = info
logger.lifecycle.name = kafka.server.BrokerLifecycleManager
logger.lifecycle.level = info
"""


def say(message: str) -> None:
    print(f"kafka cluster: {message}", file=sys.stderr, flush=True)


def fail(message: str) -> None:
    sys.exit(f"kafka cluster: {message}")


# -- certificates ---------------------------------------------------------------------------


def run_quiet(what: str, *args: str | Path) -> None:
    """Run a tool; its output only matters when it fails."""
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed ({result.returncode}): {result.stderr.strip()}")


def pki_with_openssl(pki: Path, nodes: Iterable[int]) -> dict[str, Any]:
    """A CA and EC P-256 certificates in PEM; a node's keystore is its key + certificate chain."""
    (pki / "ca.cnf").write_text(
        "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = ca\n"
        "[dn]\nCN = sidecar test CA\n"
        "[ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n"
        "subjectKeyIdentifier = hash\n"
    )
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "7"]
    ca, ca_key = pki / "ca.pem", pki / "ca.key"
    run_quiet(
        "openssl (CA)",
        *["openssl", "req", "-x509"],
        *new_key,
        *("-keyout", ca_key, "-out", ca, "-config", pki / "ca.cnf"),
    )

    def leaf(name: str, usage: str, san: bool) -> tuple[Path, Path]:
        cnf, ext = pki / f"{name}.cnf", pki / f"{name}.ext"
        cnf.write_text(f"[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {name}\n")
        ext.write_text(
            "[leaf]\nbasicConstraints = critical, CA:FALSE\n"
            "keyUsage = critical, digitalSignature\n"
            f"extendedKeyUsage = {usage}\n"
            "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n"
            + ("subjectAltName = IP:127.0.0.1, DNS:localhost\n" if san else "")
        )
        key, csr, crt = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.crt"
        run_quiet(
            f"openssl (request for {name})",
            *["openssl", "req", "-new"],
            *new_key,
            *("-keyout", key, "-out", csr, "-config", cnf),
        )
        run_quiet(
            f"openssl (certificate for {name})",
            *("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-days", "7"),
            *("-set_serial", str(secrets.randbits(63)), "-out", crt),
            *("-extfile", ext, "-extensions", "leaf"),
        )
        return key, crt

    keystores = {}
    for n in nodes:
        key, crt = leaf(f"broker-{n}", "serverAuth, clientAuth", san=True)
        store = pki / f"broker-{n}.pem"
        store.write_text(key.read_text() + crt.read_text() + ca.read_text())
        keystores[n] = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(store)}
    key, crt = leaf(CLIENT_CN, "clientAuth", san=False)
    return {
        "ca_file": str(ca),
        "keystores": keystores,
        "client_cert": str(crt),
        "client_key": str(key),
    }


def pki_with_keytool(pki: Path, nodes: Iterable[int]) -> dict[str, Any]:
    """The same CA and node certificates made with Java's keytool (PKCS12 keystores).

    keytool cannot export a private key, so there is no client certificate for Python
    (cluster.json then has no client_cert; the MTLS listener is still there).
    """
    keytool = str(Path(java()).with_name("keytool"))
    password = secrets.token_hex(12)
    common = ("-storetype", "PKCS12", "-storepass", password, "-keypass", password)
    new_key = ["-keyalg", "EC", "-groupname", "secp256r1", "-validity", "7"]
    ca_store, ca = pki / "ca.p12", pki / "ca.pem"
    run_quiet(
        "keytool (CA)",
        *(keytool, "-genkeypair", "-alias", "ca", "-dname", "CN=sidecar test CA", *new_key),
        *["-ext", "BC:c=ca:true", "-ext", "KU:c=keyCertSign,cRLSign"],
        *("-keystore", ca_store, *common),
    )
    run_quiet(
        "keytool (export of the CA)",
        *(keytool, "-exportcert", "-rfc", "-alias", "ca", "-file", ca),
        *("-keystore", ca_store, "-storetype", "PKCS12", "-storepass", password),
    )

    def node_store(n: int) -> dict[str, str]:
        name = f"broker-{n}"
        store, csr, crt = pki / f"{name}.p12", pki / f"{name}.csr", pki / f"{name}.crt"
        at = ("-keystore", store, *common)
        run_quiet(
            f"keytool (key of {name})",
            *(keytool, "-genkeypair", "-alias", "node", "-dname", f"CN={name}", *new_key, *at),
        )
        run_quiet(
            f"keytool (request of {name})",
            *(keytool, "-certreq", "-alias", "node", "-file", csr, *at),
        )
        run_quiet(
            f"keytool (certificate of {name})",
            *(keytool, "-gencert", "-alias", "ca", "-infile", csr, "-outfile", crt, "-rfc"),
            *["-validity", "7", "-ext", "SAN=ip:127.0.0.1,dns:localhost"],
            *["-ext", "EKU=serverAuth,clientAuth", "-ext", "KU:c=digitalSignature"],
            *("-keystore", ca_store, *common),
        )
        run_quiet(
            f"keytool (CA into {name})",
            *(keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", ca, *at),
        )
        run_quiet(
            f"keytool (certificate into {name})",
            *(keytool, "-importcert", "-alias", "node", "-file", crt, *at),
        )
        return {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(store),
            "ssl.keystore.password": password,
            "ssl.key.password": password,
        }

    nodes = list(nodes)
    with ThreadPoolExecutor(len(nodes)) as pool:
        stores = dict(zip(nodes, pool.map(node_store, nodes), strict=True))
    return {"ca_file": str(ca), "keystores": stores}


def make_pki(state: Path, nodes: list[int]) -> dict[str, Any]:
    pki = state / "pki"
    pki.mkdir()
    tool = os.environ.get("SIDECAR_CLUSTER_PKI") or ("openssl" if shutil.which("openssl") else "")
    if tool == "openssl":
        return pki_with_openssl(pki, nodes)
    return pki_with_keytool(pki, nodes)


# -- a minimal Kafka client (stdlib only) for readiness and ISR checks ----------------------


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str | None:
        size = self.take(">h")
        if size < 0:
            return None
        value = self.data[self.at : self.at + size].decode()
        self.at += size
        return value

    def blob(self) -> bytes:
        size = self.take(">i")
        value = self.data[self.at : self.at + max(size, 0)]
        self.at += max(size, 0)
        return value

    def array(self, item: Callable[[], Any]) -> list[Any]:
        return [item() for _ in range(max(self.take(">i"), 0))]


def encode_string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


class Connection:
    """One SASL_SSL connection authenticated with SCRAM; hostname verification is on."""

    def __init__(self, port: int, ca_file: str, user: str, password: str, mechanism: str) -> None:
        context = ssl.create_default_context(cafile=ca_file)
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        self.correlation = 0
        try:
            self._scram(user, password, mechanism)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(left)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def call(self, api_key: int, version: int, body: bytes) -> Reader:
        self.correlation += 1
        message = struct.pack(">hhi", api_key, version, self.correlation)
        message += encode_string("sidecar-cluster-script") + body
        self.sock.sendall(struct.pack(">i", len(message)) + message)
        size = struct.unpack(">i", self._read(4))[0]
        reader = Reader(self._read(size))
        if reader.take(">i") != self.correlation:
            raise ConnectionError("response out of order")
        return reader

    def _authenticate(self, payload: bytes) -> bytes:
        reply = self.call(36, 1, struct.pack(">i", len(payload)) + payload)  # SaslAuthenticate
        error, message = reply.take(">h"), reply.string()
        if error:
            raise PermissionError(f"SASL authentication failed ({error}): {message}")
        return reply.blob()

    def _scram(self, user: str, password: str, mechanism: str) -> None:
        reply = self.call(17, 1, encode_string(mechanism))  # SaslHandshake
        if reply.take(">h"):
            raise PermissionError(f"{mechanism} is not enabled: {reply.array(reply.string)}")
        digest = "sha512" if mechanism.endswith("512") else "sha256"
        nonce = secrets.token_urlsafe(18)
        first = f"n={user},r={nonce}"
        server_first = self._authenticate(f"n,,{first}".encode()).decode()
        fields = dict(part.split("=", 1) for part in server_first.split(","))
        if not fields["r"].startswith(nonce):
            raise PermissionError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(
            digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
        )
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        final = f"c=biws,r={fields['r']}"
        auth_message = f"{first},{server_first},{final}".encode()
        signature = hmac.new(hashlib.new(digest, client_key).digest(), auth_message, digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature.digest(), strict=True))
        server_final = self._authenticate(f"{final},p={base64.b64encode(proof).decode()}".encode())
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest())
        if server_final != b"v=" + expected:
            raise PermissionError("SCRAM: the server's signature does not match")

    def metadata(self) -> tuple[set[int], list[tuple[str, int, list[int], list[int]]]]:
        """Metadata v4 for every topic: the live (unfenced) brokers and, per partition,
        (topic, partition, replicas, isr)."""
        reply = self.call(3, 4, struct.pack(">ib", -1, 0))
        reply.take(">i")  # throttle

        def broker() -> int:
            node = reply.take(">i")
            reply.string(), reply.take(">i"), reply.string()
            return int(node)

        brokers = set(reply.array(broker))
        reply.string(), reply.take(">i")  # cluster id, controller id
        partitions: list[tuple[str, int, list[int], list[int]]] = []

        def topic() -> None:
            reply.take(">h")
            name = reply.string() or ""
            reply.take(">b")

            def partition() -> None:
                reply.take(">h")
                index = reply.take(">i")
                reply.take(">i")  # leader
                replicas = reply.array(lambda: reply.take(">i"))
                isr = reply.array(lambda: reply.take(">i"))
                partitions.append((name, index, replicas, isr))

            reply.array(partition)

        reply.array(topic)
        return brokers, partitions


def view_from(info: dict[str, Any], node: int) -> tuple[set[int], list[Any]]:
    """What node ``node`` reports, through its client listener, as the admin user."""
    port = next(b["port"] for b in info["brokers"] if b["id"] == node)
    admin = info["users"]["admin"]
    conn = Connection(
        port, info["ca_file"], admin["username"], admin["password"], info["mechanism"]
    )
    try:
        return conn.metadata()
    finally:
        conn.close()


# -- the nodes ------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (all held open until all are chosen)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def node_dir(state: Path, n: int) -> Path:
    return state / f"node-{n}"


def properties(lines: dict[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def node_properties(
    state: Path, n: int, ports: dict[int, dict[str, int]], pki: dict[str, Any]
) -> dict[str, object]:
    p = ports[n]
    replicas = min(3, len(ports))  # 3 on the default cluster; fewer nodes cannot hold 3
    min_isr = 2 if replicas >= 3 else 1
    voters = ",".join(f"{m}@127.0.0.1:{q['controller']}" for m, q in sorted(ports.items()))
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    config: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": n,
        "controller.quorum.voters": voters,
        "listeners": f"CLIENT://127.0.0.1:{p['client']},MTLS://127.0.0.1:{p['mtls']},"
        f"INTERNAL://127.0.0.1:{p['internal']},CONTROLLER://127.0.0.1:{p['controller']}",
        "advertised.listeners": f"CLIENT://127.0.0.1:{p['client']},"
        f"MTLS://127.0.0.1:{p['mtls']},INTERNAL://127.0.0.1:{p['internal']}",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,MTLS:SSL,INTERNAL:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        # SCRAM on the client listener only: KRaft controllers cannot use SCRAM (the
        # credentials live in the metadata log they serve), and the brokers' own traffic is
        # authenticated by their certificates.
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.client.sasl.enabled.mechanisms": ",".join(MECHANISMS),
        **{f"listener.name.client.{m.lower()}.sasl.jaas.config": jaas for m in MECHANISMS},
        **pki["keystores"][n],
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki["ca_file"],
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.client.auth": "none",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": ";".join(["User:admin", *(f"User:broker-{m}" for m in sorted(ports))]),
        "log.dirs": node_dir(state, n) / "data",
        "num.partitions": 3,
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "auto.create.topics.enable": "false",
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": 6,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 6,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": 0,
        # Sized for a 2-core CI machine running three nodes at once.
        "num.network.threads": 2,
        "num.io.threads": 4,
        "background.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
    }
    return config


def jvm(folder: Path) -> list[str]:
    return [
        java(),
        "-Xms192m",
        "-Xmx512m",
        "-XX:+UseG1GC",
        "-XX:TieredStopAtLevel=1",
        # The jars are Maven Central's Kafka release: verifying their bytecode at every start
        # costs about 15 % of a node's start-up CPU.
        "-XX:+UnlockDiagnosticVMOptions",
        "-XX:-BytecodeVerificationRemote",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
        "-cp",
        f"{LIBS}/*",
    ]


def format_storage(state: Path, n: int, cluster_id: str, users: dict[str, Any]) -> None:
    folder = node_dir(state, n)
    scram = []
    for mechanism in MECHANISMS:
        for user in users.values():
            scram += [
                "--add-scram",
                f"{mechanism}=[name={user['username']},password={user['password']}]",
            ]
    with (folder / "format.log").open("w") as log:
        result = subprocess.run(
            [
                *jvm(folder),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(folder / "server.properties"),
                *scram,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        tail = "\n".join((folder / "format.log").read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"formatting node {n} failed ({result.returncode}):\n{tail}")


def launch(state: Path, n: int) -> int:
    folder = node_dir(state, n)
    with (folder / "stdout.log").open("a") as out:
        proc = subprocess.Popen(
            [*jvm(folder), "kafka.Kafka", str(folder / "server.properties")],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (folder / "pid").write_text(str(proc.pid))
    CHILDREN[proc.pid] = proc
    return proc.pid


def alive(pid: int) -> bool:
    if pid in CHILDREN:
        return CHILDREN[pid].poll() is None
    try:  # a node started by an earlier command
        os.kill(pid, 0)
        return not Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1].startswith("Z")
    except (ProcessLookupError, FileNotFoundError):
        return False


def tails(state: Path, nodes: Iterable[int], lines: int = 25) -> str:
    out = []
    for n in nodes:
        for name in ("stdout.log", "kafka.log"):
            path = node_dir(state, n) / name
            if path.exists() and path.stat().st_size:
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path} (last {len(text)} lines)\n" + "\n".join(text))
    return "\n".join(out)


def write_info(state: Path, info: dict[str, Any]) -> None:
    tmp = state / "cluster.json.tmp"
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, state / "cluster.json")


def wait_until(
    pending: Callable[[], str | None], pids: dict[int, int], timeout: float, what: str
) -> None:
    """Poll ``pending`` (what is still missing, or None once done) while every node lives."""
    deadline = time.monotonic() + timeout
    missing: str | None = "not checked yet"
    while time.monotonic() < deadline:
        dead = [n for n, pid in pids.items() if not alive(pid)]
        if dead:
            raise RuntimeError(f"node {', '.join(map(str, dead))} exited while {what}")
        missing = pending()
        if missing is None:
            return
        time.sleep(0.5)
    raise RuntimeError(f"timed out after {timeout:.0f} s {what}; last seen: {missing}")


def start(state: Path, count: int) -> None:
    began = time.monotonic()
    # Terminated mid-start (SIGTERM, or SIGINT as usual): the nodes started so far are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    resolve()
    if state.exists():
        stop(state)
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    nodes = list(range(1, count + 1))
    try:
        pki = make_pki(state, nodes)
        made_pki = time.monotonic()
        chosen = iter(free_ports(4 * count))
        ports = {
            n: {k: next(chosen) for k in ("client", "mtls", "internal", "controller")}
            for n in nodes
        }
        users = {u: {"username": u, "password": secrets.token_hex(16)} for u in USERS}
        for n in nodes:
            folder = node_dir(state, n)
            (folder / "data").mkdir(parents=True)
            (folder / "server.properties").write_text(
                properties(node_properties(state, n, ports, pki))
            )
            (folder / "log4j2.properties").write_text(LOG4J.format(log=folder / "kafka.log"))
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's Uuid: the tools would read it as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(lambda n: format_storage(state, n, cluster_id, users), nodes))
        formatted = time.monotonic()
        pids = {n: launch(state, n) for n in nodes}
        info: dict[str, Any] = {
            "bootstrap": ",".join(f"127.0.0.1:{ports[n]['client']}" for n in nodes),
            "mtls_bootstrap": ",".join(f"127.0.0.1:{ports[n]['mtls']}" for n in nodes),
            "ca_file": pki["ca_file"],
            "mechanism": MECHANISMS[0],
            "mechanisms": list(MECHANISMS),
            "users": users,
            "brokers": [
                {
                    "id": n,
                    "port": ports[n]["client"],
                    "pid": pids[n],
                    **{f"{k}_port": v for k, v in ports[n].items() if k != "client"},
                    "log": str(node_dir(state, n) / "kafka.log"),
                }
                for n in nodes
            ],
            "super_users": ["User:admin", *(f"User:broker-{n}" for n in nodes)],
            "cluster_id": cluster_id,
            "kafka_version": VERSION,
            "libs": str(LIBS),
            "admin_properties": str(state / "admin.properties"),
        }
        if "client_cert" in pki:
            info.update(
                client_cert=pki["client_cert"],
                client_key=pki["client_key"],
                client_principal=f"User:{CLIENT_CN}",
            )
        admin = users["admin"]
        (state / "admin.properties").write_text(
            properties(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": MECHANISMS[0],
                    "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule"
                    f' required username="{admin["username"]}" password="{admin["password"]}";',
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": pki["ca_file"],
                }
            )
        )
        write_info(state, info)  # before readiness: `stop` and post-mortems can read it

        ready: set[int] = set()

        def not_ready() -> str | None:
            missing = []
            for n in nodes:
                if n in ready:
                    continue
                try:
                    brokers, _ = view_from(info, n)
                except (OSError, ValueError, KeyError, struct.error) as exc:  # not serving yet
                    missing.append(f"node {n}: {exc!r}")
                    continue
                if brokers >= set(nodes):
                    ready.add(n)
                else:
                    missing.append(f"node {n} sees live brokers {sorted(brokers)}")
            return "; ".join(missing) or None

        wait_until(not_ready, pids, START_TIMEOUT, "waiting for every node to serve clients")
    except (RuntimeError, OSError) as exc:
        say(f"start failed: {exc}\n{tails(state, nodes)}")
        stop(state)
        sys.exit(1)
    except BaseException:  # interrupted: leave nothing running
        stop(state)
        raise
    done = time.monotonic()
    say(
        f"Apache Kafka {VERSION}, {count} KRaft nodes up on {info['bootstrap']} (SASL_SSL) "
        f"in {done - began:.1f} s (certificates {made_pki - began:.1f} s, format "
        f"{formatted - made_pki:.1f} s, start {done - formatted:.1f} s); state {state}"
    )


def pid_files(state: Path) -> list[Path]:
    return sorted(state.glob("node-*/pid"))


def terminate(pids: dict[Path, int], timeout: float) -> list[int]:
    """SIGTERM every process group, SIGKILL what is left after ``timeout``; the killed pids."""
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(pid) for pid in pids.values()):
        time.sleep(0.1)
    killed = []
    for pid in pids.values():
        if alive(pid):
            killed.append(pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for pid in killed:
        while alive(pid):
            time.sleep(0.05)
    for path in pids:
        path.unlink(missing_ok=True)
    return killed


def stop(state: Path) -> None:
    pids = {path: int(path.read_text()) for path in pid_files(state)}
    if not pids:
        return
    killed = terminate(pids, STOP_TIMEOUT)
    say(
        f"stopped {len(pids)} node(s) ({', '.join(str(p) for p in pids.values())})"
        + (f"; killed (still there after {STOP_TIMEOUT:.0f} s): {killed}" if killed else "")
    )


def restart_broker(state: Path, n: int) -> None:
    info = json.loads((state / "cluster.json").read_text())
    nodes = [b["id"] for b in info["brokers"]]
    if n not in nodes:
        fail(f"no node {n} (nodes: {nodes})")
    pid_file = node_dir(state, n) / "pid"
    began = time.monotonic()
    running = {pid_file: int(pid_file.read_text())} if pid_file.exists() else {}
    killed = terminate(running, RESTART_STOP_TIMEOUT)
    stopped = time.monotonic()
    pid = launch(state, n)
    for b in info["brokers"]:
        if b["id"] == n:
            b["pid"] = pid
    write_info(state, info)
    pids = {m: int(node_dir(state, m).joinpath("pid").read_text()) for m in nodes}
    partitions = 0

    def not_back() -> str | None:
        nonlocal partitions
        for m in nodes:
            try:
                brokers, parts = view_from(info, m)
            except (OSError, ValueError, KeyError, struct.error) as exc:  # not serving yet
                return f"node {m}: {exc!r}"
            if n not in brokers:
                return f"node {m} does not list node {n} as a live broker"
            mine = [p for p in parts if n in p[2]]
            behind = [f"{p[0]}-{p[1]}" for p in mine if n not in p[3]]
            if behind:
                return (
                    f"node {m}: node {n} not in the ISR of {len(behind)} partitions ({behind[:5]})"
                )
            partitions = len(mine)
        return None

    try:
        wait_until(not_back, pids, START_TIMEOUT, f"waiting for node {n} to rejoin the ISR")
    except RuntimeError as exc:
        fail(f"restart of node {n}: {exc}\n{tails(state, [n])}")
    if killed:
        fail(f"node {n} did not stop within {RESTART_STOP_TIMEOUT:.0f} s and was killed")
    say(
        f"node {n} restarted: stopped in {stopped - began:.1f} s, back in the ISR of its "
        f"{partitions} partitions {time.monotonic() - stopped:.1f} s later (pid {pid})"
    )


def main() -> None:
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "start":
        count = 3
        if args[2:3] == ["--brokers"] and len(args) == 4 and args[3].isdigit():
            count = int(args[3])
        elif len(args) != 2:
            sys.exit(__doc__)
        if count < 1:
            fail("--brokers must be at least 1")
        start(Path(args[1]), count)
    elif len(args) == 2 and args[0] == "stop":
        stop(Path(args[1]))
    elif len(args) == 3 and args[0] == "restart-broker" and args[2].isdigit():
        restart_broker(Path(args[1]), int(args[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
