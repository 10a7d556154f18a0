from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from sidecar.adapters.http import MetricsServer
from sidecar.adapters.prometheus import Metrics


@dataclass
class FakeProbe:
    """What the service reports to /readyz; the test flips it."""

    ready: bool = False
    why: str = "joining consumer group"

    def __call__(self) -> tuple[bool, str]:
        return self.ready, self.why


@dataclass
class Server:
    server: MetricsServer
    probe: FakeProbe


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    registry = CollectorRegistry()
    Metrics(registry)
    probe = FakeProbe()
    metrics_server = MetricsServer(registry, probe, host="127.0.0.1", port=0)
    await metrics_server.start()
    try:
        yield Server(metrics_server, probe)
    finally:
        await metrics_server.stop()


async def request(port: int, line: str) -> tuple[int, dict[str, str], str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{line}\r\nHost: localhost\r\nAccept: */*\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    if not line.startswith("HEAD "):
        assert int(headers["content-length"]) == len(body)
    return int(status_line.split()[1]), headers, body.decode()


async def test_port_zero_binds_a_real_port(server: Server) -> None:
    assert server.server.port > 0


async def test_metrics_endpoint_serves_the_registry(server: Server) -> None:
    status, headers, body = await request(server.server.port, "GET /metrics HTTP/1.1")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    assert "sidecar_build_info{" in body
    assert "# HELP sidecar_cases_total" in body


@pytest.mark.parametrize(
    ("line", "status"),
    [
        pytest.param("GET /healthz HTTP/1.1", 200, id="healthz"),
        pytest.param("GET /healthz?verbose=1 HTTP/1.1", 200, id="healthz-query-string"),
        pytest.param("GET /nope HTTP/1.1", 404, id="unknown-path"),
        pytest.param("GET / HTTP/1.1", 404, id="root-path"),
        pytest.param("POST /metrics HTTP/1.1", 405, id="post-not-allowed"),
    ],
)
async def test_routes(server: Server, line: str, status: int) -> None:
    assert (await request(server.server.port, line))[0] == status


async def test_head_has_headers_but_no_body(server: Server) -> None:
    status, headers, body = await request(server.server.port, "HEAD /metrics HTTP/1.1")
    assert (status, body) == (200, "")
    assert int(headers["content-length"]) > 0


async def test_readyz_follows_the_probe(server: Server) -> None:
    status, _, body = await request(server.server.port, "GET /readyz HTTP/1.1")
    assert (status, body) == (503, "joining consumer group\n")

    server.probe.ready, server.probe.why = True, "ok"

    status, _, body = await request(server.server.port, "GET /readyz HTTP/1.1")
    assert (status, body) == (200, "ok\n")


async def test_garbage_request_line_does_not_kill_the_server(server: Server) -> None:
    status, _, _ = await request(server.server.port, "\x00\x01garbage")
    assert status == 405
    assert (await request(server.server.port, "GET /healthz HTTP/1.1"))[0] == 200


async def test_stop_closes_the_port() -> None:
    metrics_server = MetricsServer(CollectorRegistry(), FakeProbe(), host="127.0.0.1", port=0)
    await metrics_server.start()
    port = metrics_server.port
    await metrics_server.stop()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
