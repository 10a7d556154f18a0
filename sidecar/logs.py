"""How sidecar writes its log: one setup, one escaping rule, two formats.

:func:`configure` is called once by a command that logs (``run``,
``backfill``). It installs one handler on the root logger, on stderr:

- **levels**: sidecar's own loggers (``sidecar.*``) at the level asked for;
  every other library (aiokafka, google-genai, httpx, ...) at WARNING, so a
  normal start is a handful of sidecar lines. ``--log-level debug`` shows
  their INFO lines too;
- **escaping**: every message is rendered and then passed through
  :func:`shown`, so control characters from untrusted values (agent and
  model names, conversation ids, anything read from a record) are shown as
  escapes (``\\x1b``, ``\\r``, ``\\n``), never interpreted by a terminal or a
  log reader. A value can therefore neither clear the screen nor forge a
  second line. Tracebacks keep their line breaks, every line indented;
- **format**: ``text`` (``TIME LEVEL LOGGER: MESSAGE``) or ``json`` (one
  object per line: ``time``, ``level``, ``logger``, ``message`` and
  ``exception`` when there is one), for log pipelines;
- **repeats**: a warning or error that repeats (same logger, same message
  template) is written at most once per ``repeat_window_s``; the next one
  written after the window says how many were held back.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Literal

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

OWN = "sidecar"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Characters a terminal or a line-based reader may act on: C0 and C1 controls,
# DEL, the Unicode line and paragraph separators, bidirectional overrides and
# isolates (which reorder what is shown), and lone surrogates (unencodable).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shown(text: str) -> str:
    """``text`` with every control character written as an escape (``text`` itself when none)."""
    if text.isprintable() or _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)


def _shown_lines(text: str) -> str:
    """Multi-line text (a traceback): each line escaped, continuation lines indented."""
    return "\n".join("  " + shown(line) for line in text.split("\n"))


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE`` with the message escaped (:func:`shown`)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = shown(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        return _shown_lines(super().formatException(ei))  # type: ignore[arg-type]

    def formatStack(self, stack_info: str) -> str:
        return _shown_lines(stack_info)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; the JSON encoder escapes control characters itself."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": shown(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = record.stack_info
        # ensure_ascii: the line stays ASCII whatever the values hold (surrogates too).
        return json.dumps(entry, ensure_ascii=True)


class RepeatFilter(logging.Filter):
    """Holds back warnings and errors that repeat within ``window_s`` (module docstring).

    A repeat is the same logger and message template (``record.msg``), whatever
    its arguments, so a flood of dead letters with distinct offsets is one
    line per window. At most ``memory`` templates are remembered (the oldest
    forgotten first); lines below WARNING always pass.
    """

    def __init__(
        self,
        window_s: float = 60.0,
        memory: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.window_s = window_s
        self.memory = memory
        self.clock = clock
        # (logger, template) -> (time of the last line written, lines held back since)
        self._seen: OrderedDict[tuple[str, str], tuple[float, int]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg))
        now = self.clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.window_s:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        held = last[1] if last is not None else 0
        self._seen[key] = (now, 0)
        self._seen.move_to_end(key)
        while len(self._seen) > self.memory:
            self._seen.popitem(last=False)
        if held:
            record.msg = f"{record.msg} ({held} more like this in the last {self.window_s:.0f}s)"
        return True


def level_of(name: str) -> int:
    """The logging level called ``name`` (any case); ValueError naming the choices otherwise."""
    upper = name.strip().upper()
    if upper not in LEVELS:
        raise ValueError(f"unknown log level {name!r}; choose one of {', '.join(LEVELS).lower()}")
    return logging.getLevelName(upper)  # type: ignore[no-any-return]


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The one handler; without a stream of its own it writes to ``sys.stderr`` as it is now."""

    def __init__(self, stream: IO[str] | None) -> None:
        super().__init__(stream if stream is not None else sys.stderr)
        self._follow = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow:
            self.stream = sys.stderr
        super().emit(record)


class _Levels(logging.Filter):
    """sidecar's loggers from ``own`` up, everything else from ``others`` up."""

    def __init__(self, own: int, others: int) -> None:
        super().__init__()
        self.own = own
        self.others = others

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        mine = name == OWN or name.startswith(OWN + ".")
        return record.levelno >= (self.own if mine else self.others)


def configure(
    level: str = "INFO",
    fmt: LogFormat = "text",
    *,
    stream: IO[str] | None = None,
    repeat_window_s: float = 60.0,
    force: bool = False,
) -> logging.Handler | None:
    """Install sidecar's one log handler (module docstring) and return it.

    Like :func:`logging.basicConfig`, nothing changes when the root logger
    already has handlers that are not sidecar's (a host application, pytest)
    unless ``force``; then None is returned. An earlier sidecar handler is
    replaced.
    """
    own = level_of(level)
    others = logging.INFO if own <= logging.DEBUG else max(own, logging.WARNING)
    root = logging.getLogger()
    foreign = [h for h in root.handlers if not isinstance(h, _Handler)]
    if foreign and not force:
        return None
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_Levels(own, others))
    handler.addFilter(RepeatFilter(repeat_window_s))
    for old in list(root.handlers):
        if force or isinstance(old, _Handler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(min(own, others))
    return handler


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format``; their defaults come from the ``log`` settings."""
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=[name.lower() for name in LEVELS],
        help="sidecar's log level (default: the log.level setting, info); "
        "debug also shows other libraries' info lines",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        help="text, or json (one object per line) for log pipelines "
        "(default: the log.format setting, text)",
    )


def configure_from(args: argparse.Namespace, level: str, fmt: LogFormat) -> tuple[str, LogFormat]:
    """:func:`configure` with the arguments of :func:`add_arguments` over the settings' values.

    Returns the level and format in effect (passed on to worker processes).
    """
    chosen: tuple[str, LogFormat] = (args.log_level or level, args.log_format or fmt)
    configure(*chosen)
    return chosen
