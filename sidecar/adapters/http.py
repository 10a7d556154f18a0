"""A minimal asyncio HTTP server for ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process's event loop runs; ``/readyz``
answers 200 once the service reports ready (Kafka joined, rubrics loaded) and
503 otherwise, with the reason in the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from sidecar.adapters.exposition import exposition
from sidecar.errors import ConfigError

ReadyProbe = Callable[[], tuple[bool, str]]


class MetricsServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        ready: ReadyProbe,
        host: str = "0.0.0.0",
        port: int = 9464,
    ) -> None:
        self._registry = registry
        self._ready = ready
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen; a ConfigError naming the address when it cannot (in use, not local, denied)."""
        try:
            self._server = await asyncio.start_server(self._handle, self._host, self._port)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {self._host}:{self._port} "
                f"({os.strerror(exc.errno) if exc.errno else exc}): another process may be listening there; "
                "choose another port (metrics.port, SIDECAR_METRICS__PORT)"
            ) from exc

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            accept = ""
            while True:  # drain headers
                line = await asyncio.wait_for(reader.readline(), timeout=5)
                if line in (b"\r\n", b"\n", b""):
                    break
                accept = _accept(line) or accept
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            method = parts[0] if parts else ""
            status, content_type, body = self._route(method, path, accept)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            # A HEAD answer carries the headers of GET but never a body (RFC 9110 9.3.2).
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _route(self, method: str, path: str, accept: str = "") -> tuple[str, str, bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        match path:
            case "/metrics":
                content_type, body = exposition(self._registry, accept)
                return "200 OK", content_type, body
            case "/healthz":
                return "200 OK", "text/plain", b"ok\n"
            case "/readyz":
                ready, why = self._ready()
                status = "200 OK" if ready else "503 Service Unavailable"
                return status, "text/plain", (why + "\n").encode()
            case _:
                return "404 Not Found", "text/plain", b"try /metrics, /healthz or /readyz\n"


def _accept(line: bytes) -> str | None:
    """The value of an ``Accept`` header line (None for any other header)."""
    name, _, value = line.decode("latin-1").partition(":")
    return value.strip() if name.strip().lower() == "accept" else None
