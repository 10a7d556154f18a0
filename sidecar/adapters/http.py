"""A minimal asyncio HTTP server for ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process's event loop runs; ``/readyz``
answers 200 once the service reports ready (Kafka joined, rubrics loaded) and
503 otherwise, with the reason in the body.

The port listens on all interfaces by default, so its clients are not
trusted: each connection has one deadline for the whole request and answer
(``request_timeout_s``; a client sending a header line every few seconds is
closed when it passes), at most ``max_connections`` are served at once (one
more gets a short 503 and is closed at once, without being read), a request
may hold at most ``MAX_HEADER_LINES`` header lines of at most 64 KiB each,
and when building an answer fails the client gets a 500 naming the error,
never a dropped connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from sidecar.adapters.exposition import exposition
from sidecar.errors import ConfigError
from sidecar.settings import MetricsSettings

ReadyProbe = Callable[[], tuple[bool, str]]

log = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 64
MAX_HEADER_LINES = 100
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 32\r\nConnection: close\r\n\r\ntoo many connections; try again\n"
)


class _BadRequest(Exception):
    pass


class MetricsServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        ready: ReadyProbe,
        host: str = "0.0.0.0",
        port: int = 9464,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.connections = 0  # being served now
        self.refused = 0  # connections over max_connections, answered 503 unread
        self._registry = registry
        self._ready = ready
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @classmethod
    def of(
        cls,
        settings: MetricsSettings,
        registry: CollectorRegistry,
        ready: ReadyProbe,
        port: int | None = None,
    ) -> MetricsServer:
        """The server the ``metrics`` settings describe (``port`` given: that port instead)."""
        return cls(
            registry,
            ready,
            settings.host,
            settings.port if port is None else port,
            request_timeout_s=settings.request_timeout_s,
            max_connections=settings.max_connections,
        )

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
        if self.connections >= self.max_connections:
            self.refused += 1
            with contextlib.suppress(ConnectionError, TimeoutError, OSError):
                writer.write(_BUSY)
                writer.write_eof()
                # What the client sent, read briefly and dropped: closing with it unread
                # would reset the connection before the client reads the 503.
                await asyncio.wait_for(reader.read(65536), 0.2)
            await _close(writer, 1.0)
            return
        self.connections += 1
        try:
            async with asyncio.timeout(self.request_timeout_s):
                await self._serve(reader, writer)
        except (TimeoutError, ConnectionError, UnicodeDecodeError, _BadRequest, ValueError):
            pass  # too slow, gone, or not HTTP: closed without an answer
        finally:
            self.connections -= 1
            await _close(writer, 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = await reader.readline()
        accept = ""
        for _ in range(MAX_HEADER_LINES + 1):  # drain headers
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            accept = _accept(line) or accept
        else:
            raise _BadRequest("too many header lines")
        parts = request_line.decode("latin-1").split()
        path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
        method = parts[0] if parts else ""
        try:
            status, content_type, body = self._route(method, path, accept)
        # The client gets an answer whatever failed in building it.
        except Exception as exc:
            log.exception("answering %s %s failed", method, path)
            status, content_type = "500 Internal Server Error", "text/plain"
            body = f"internal error: {type(exc).__name__}; see the sidecar's log\n".encode()
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        # A HEAD answer carries the headers of GET but never a body (RFC 9110 9.3.2).
        writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
        await writer.drain()

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


async def _close(writer: asyncio.StreamWriter, wait_s: float) -> None:
    """Close ``writer``, waiting at most ``wait_s`` for a client that does not read."""
    writer.close()
    with contextlib.suppress(ConnectionError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), wait_s)
