#!/usr/bin/env python3
"""Start and stop a single-node Apache Kafka broker (KRaft) on loopback for the tests.

Test infrastructure only. The broker's jars are resolved from Maven Central by
scripts/kafka/pom.xml into ~/.cache/sidecar/kafka-<version>/libs (outside the
repository) and run with the machine's Java 17.

    broker.py start STATE_DIR   # once ready: STATE_DIR/bootstrap holds 127.0.0.1:PORT
    broker.py stop STATE_DIR
    broker.py resolve STATE_DIR # only fetch the jars

Everything it says, and all that Maven and the broker print, goes to stderr or to
log files in STATE_DIR; stdout stays empty, so nothing can leak into a caller
that captures it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
VERSION = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
CACHE = Path(os.environ.get("SIDECAR_CACHE", Path.home() / ".cache" / "sidecar"))
LIBS = CACHE / f"kafka-{VERSION}" / "libs"

LOG4J = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p %c: %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


def say(message: str) -> None:
    print(f"kafka: {message}", file=sys.stderr, flush=True)


def resolve() -> None:
    marker = LIBS / ".complete"
    if marker.exists():
        return
    if shutil.which("mvn") is None:
        sys.exit(
            "kafka: Maven (mvn) is needed to resolve the broker jars; install it (apt-get install maven)"
        )
    say(f"resolving Apache Kafka {VERSION} from Maven Central into {LIBS}")
    if LIBS.exists():
        shutil.rmtree(LIBS)
    LIBS.mkdir(parents=True)
    log = LIBS.parent / "maven.log"
    with log.open("w") as out:
        result = subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-Dstyle.color=never",
                "-f",
                str(POM),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={LIBS}",
                "-DincludeScope=runtime",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        sys.exit(
            f"kafka: Maven could not resolve the broker's jars (exit {result.returncode}):\n{tail}"
        )
    marker.write_text(VERSION)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        sys.exit(
            "kafka: java (17+) not found; install a JDK (apt-get install openjdk-17-jre-headless)"
        )
    return found


def start(state: Path) -> None:
    resolve()
    if (state / "pid").exists():
        stop(state)
    shutil.rmtree(state, ignore_errors=True)
    (state / "data").mkdir(parents=True)
    port, controller = free_port(), free_port()
    props = state / "server.properties"
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{controller}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={state / 'data'}",
                "num.partitions=3",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=3",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=true",
                "log.flush.interval.messages=1000000",
            ]
        )
        + "\n"
    )
    (state / "log4j2.properties").write_text(LOG4J.format(log=state / "kafka.log"))
    classpath = f"{LIBS}/*"
    jvm = [
        java(),
        "-Xms256m",
        "-Xmx768m",
        "-XX:+UseG1GC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={state / 'log4j2.properties'}",
        "-cp",
        classpath,
    ]
    subprocess.run(
        [
            *jvm,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            str(uuid.uuid4()).replace("-", "")[:22],
            "-c",
            str(props),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
    )
    out = (state / "stdout.log").open("w")
    proc = subprocess.Popen(
        [*jvm, "kafka.Kafka", str(props)],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    (state / "pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(
                f"kafka: broker exited with {proc.returncode}; see {state}/stdout.log and kafka.log"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.3)
    else:
        stop(state)
        sys.exit("kafka: broker did not open its port within 90 s")
    (state / "bootstrap").write_text(f"127.0.0.1:{port}")
    say(f"Apache Kafka {VERSION} (KRaft) up on 127.0.0.1:{port}, pid {proc.pid}, state {state}")


def stop(state: Path) -> None:
    pid_file = state / "pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pid_file.unlink(missing_ok=True)
    say(f"broker {pid} stopped")


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in {"start", "stop", "resolve"}:
        sys.exit(__doc__)
    state = Path(sys.argv[2])
    {"start": start, "stop": stop, "resolve": lambda _: resolve()}[sys.argv[1]](state)


if __name__ == "__main__":
    main()
