"""Slow and many clients on the metrics port, over real sockets.

The port listens on 0.0.0.0 by default. A client sending one header line
every few seconds once held its connection for as long as it liked (the
timeout was per line), with no cap on connections, and a failing exposition
dropped the connection. Now: one deadline for the whole request, a
connection cap answered with a quick 503, and a 500 when the answer fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.registry import Collector

from sidecar.adapters.http import MetricsServer
from sidecar.settings import Settings


async def _get(port: int, path: str) -> tuple[bytes, float]:
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    await _closed(writer)
    return answer, time.monotonic() - started


async def _closed(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def _slow_client(port: int, every_s: float, lines: int) -> float:
    """Sends a header line every ``every_s``; seconds until the server closed it."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\n")
    try:
        for i in range(lines):
            writer.write(f"X-Slow-{i}: 1\r\n".encode())
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(1), every_s) == b"":
                    break  # closed by the server
            except TimeoutError:
                continue
    except ConnectionError:
        pass
    finally:
        await _closed(writer)
    return time.monotonic() - started


def _server(registry: CollectorRegistry | None = None, **limits: float) -> MetricsServer:
    if registry is None:
        registry = CollectorRegistry()
        Counter("sidecar_demo_total", "demo", registry=registry).inc()
    return MetricsServer(registry, lambda: (True, "ok"), "127.0.0.1", 0, **limits)  # type: ignore[arg-type]


def test_the_settings_have_the_defaults() -> None:
    metrics = Settings().metrics
    assert (metrics.request_timeout_s, metrics.max_connections) == (10.0, 64)


async def test_slow_header_clients_are_closed_at_the_deadline_and_healthz_answers() -> None:
    server = _server(request_timeout_s=1.0)
    await server.start()
    try:
        # 20 clients, a header line every 0.25 s for 6 s if they were let.
        slow = [asyncio.create_task(_slow_client(server.port, 0.25, 24)) for _ in range(20)]
        await asyncio.sleep(0.3)
        probes = []
        for _ in range(5):  # /healthz during the slowloris
            answer, seconds = await _get(server.port, "/healthz")
            assert answer.startswith(b"HTTP/1.1 200 OK")
            probes.append(seconds)
            await asyncio.sleep(0.1)
        held = await asyncio.gather(*slow)
    finally:
        await server.stop()
    assert max(probes) < 0.5, probes
    # Each closed at the 1 s deadline, not after its 6 s of lines.
    assert all(0.9 <= s < 2.5 for s in held), held


async def test_connections_over_the_cap_get_a_quick_503() -> None:
    server = _server(max_connections=5, request_timeout_s=30.0)
    await server.start()
    idle = []
    try:
        for _ in range(5):
            idle.append(await asyncio.open_connection("127.0.0.1", server.port))
        await asyncio.sleep(0.1)
        answer, seconds = await _get(server.port, "/healthz")
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"too many connections" in answer
        assert seconds < 1.0
        assert server.refused == 1
        for _, writer in idle:  # once they go, the port serves again
            await _closed(writer)
        await asyncio.sleep(0.2)
        answer, _ = await _get(server.port, "/healthz")
        assert answer.startswith(b"HTTP/1.1 200 OK")
    finally:
        await server.stop()


class _Broken(Collector):
    def collect(self) -> Iterator[object]:  # type: ignore[override]
        raise RuntimeError("collector broke")


async def test_a_failing_exposition_is_a_500_not_a_dropped_connection() -> None:
    registry = CollectorRegistry()
    registry.register(_Broken())
    server = _server(registry)
    await server.start()
    try:
        answer, _ = await _get(server.port, "/metrics")
        healthz, _ = await _get(server.port, "/healthz")
    finally:
        await server.stop()
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error")
    assert b"RuntimeError" in answer
    assert healthz.startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize("lines", [200, 1])
async def test_too_many_or_too_long_header_lines_are_closed(lines: int) -> None:
    server = _server()
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        header = b"X: " + b"a" * (100_000 if lines == 1 else 10) + b"\r\n"
        writer.write(b"GET /metrics HTTP/1.1\r\n" + header * lines + b"\r\n")
        try:
            answer = await asyncio.wait_for(reader.read(), 5)
        except ConnectionError:  # closed with the request unread: a reset
            answer = b""
        await _closed(writer)
        await asyncio.sleep(0.05)
        assert not answer.startswith(b"HTTP/1.1 200")
        assert server.connections == 0
    finally:
        await server.stop()
