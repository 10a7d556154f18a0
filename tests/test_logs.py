"""sidecar's log: untrusted values escaped, libraries quiet, JSON for pipelines, repeats held back."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from sidecar import logs
from sidecar.logs import RepeatFilter, configure, shown

# Values an agent controls that reach log lines: agent and model names, conversation ids.
HOSTILE = [
    pytest.param("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H", id="ansi-clear-screen"),
    pytest.param("agent\rINFO sidecar: ok", "agent\\rINFO sidecar: ok", id="carriage-return"),
    pytest.param(
        "m\n2026-01-01 INFO sidecar: all good",
        "m\\n2026-01-01 INFO sidecar: all good",
        id="newline",
    ),
    pytest.param("a\u2028b\u2029c", "a\\u2028b\\u2029c", id="unicode-line-separators"),
    pytest.param("user\u202etxt.exe", "user\\u202etxt.exe", id="bidi-override"),
    pytest.param("bell\x07\x00nul\x7fdel\x9bcsi", "bell\\x07\\x00nul\\x7fdel\\x9bcsi", id="c0-c1"),
    pytest.param("tab\there", "tab\\there", id="tab"),
    pytest.param("lone\ud800", "lone\\ud800", id="lone-surrogate"),
]

PLAIN = ["gpt-4o-mini", "agent/v2 (beta)", "réservation 日本語 ✓", "back\\slash", ""]


@pytest.mark.parametrize(("raw", "escaped"), HOSTILE)
def test_control_characters_are_shown_as_escapes(raw: str, escaped: str) -> None:
    assert shown(raw) == escaped


@pytest.mark.parametrize("text", PLAIN)
def test_printable_text_is_left_alone(text: str) -> None:
    assert shown(text) is text


@pytest.fixture
def root_state() -> Iterator[None]:
    """configure(force=True) takes over the root logger; give it back to pytest afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def logged(level: str = "info", fmt: logs.LogFormat = "text") -> io.StringIO:
    out = io.StringIO()
    configure(level, fmt, stream=out, force=True)
    return out


@pytest.mark.parametrize(("raw", "escaped"), HOSTILE)
@pytest.mark.usefixtures("root_state")
def test_a_hostile_value_stays_on_its_own_line(raw: str, escaped: str) -> None:
    out = logged()
    logging.getLogger("sidecar.engine.emit").warning(
        "agent %s, model %s, conversation %s", raw, raw, raw
    )
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(f"agent {escaped}, model {escaped}, conversation {escaped}")
    assert "\x1b" not in out.getvalue()
    assert "\r" not in out.getvalue()


@pytest.mark.usefixtures("root_state")
def test_json_is_one_ascii_object_per_line_with_the_value_escaped() -> None:
    out = logged(fmt="json")
    log = logging.getLogger("sidecar.engine.partitions")
    log.warning("dead letter for agent %s", 'x\n{"level": "INFO"}\x1b[31m')
    try:
        raise ValueError("bad\nline")
    except ValueError:
        log.exception("failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "WARNING"
    assert first["logger"] == "sidecar.engine.partitions"
    assert first["message"] == 'dead letter for agent x\\n{"level": "INFO"}\\x1b[31m'
    assert first["time"].endswith("+00:00")
    assert "ValueError: bad" in second["exception"]
    assert out.getvalue().isascii()


@pytest.mark.usefixtures("root_state")
def test_a_traceback_keeps_its_lines_indented_and_escaped() -> None:
    out = logged()
    try:
        raise RuntimeError("agent\x1b[2J\nINFO sidecar: all good")
    except RuntimeError:
        logging.getLogger("sidecar").exception("evaluating failed")
    first, *rest = out.getvalue().rstrip("\n").split("\n")
    assert first.endswith("ERROR sidecar: evaluating failed")
    assert rest
    assert all(line.startswith("  ") for line in rest)
    assert "\x1b" not in out.getvalue()


@pytest.mark.parametrize(
    ("level", "shown_loggers"),
    [
        pytest.param("info", {"sidecar info", "sidecar warning", "aiokafka warning"}, id="info"),
        pytest.param(
            "debug",
            {
                "sidecar debug",
                "sidecar info",
                "sidecar warning",
                "aiokafka info",
                "aiokafka warning",
            },
            id="debug",
        ),
        pytest.param("error", set(), id="error"),
    ],
)
@pytest.mark.usefixtures("root_state")
def test_libraries_stay_at_warning_unless_debugging(level: str, shown_loggers: set[str]) -> None:
    out = logged(level)
    for name in ("sidecar.engine.replica", "aiokafka.consumer.group_coordinator"):
        logger = logging.getLogger(name)
        owner = name.split(".")[0]
        logger.debug("%s debug", owner)
        logger.info("%s info", owner)
        logger.warning("%s warning", owner)
    written = {line.split(": ", 1)[1] for line in out.getvalue().splitlines()}
    assert written == shown_loggers


@pytest.mark.usefixtures("root_state")
def test_the_afc_and_http_request_lines_are_not_written_by_default() -> None:
    out = logged()
    logging.getLogger("google_genai.models").info("AFC is enabled with max remote calls: 10.")
    logging.getLogger("httpx").info('HTTP Request: POST https://example/ "HTTP/1.1 200 OK"')
    assert out.getvalue() == ""


def test_configure_leaves_a_host_applications_logging_alone() -> None:
    root = logging.getLogger()
    assert root.handlers, "pytest's handlers are on the root logger"
    before = (list(root.handlers), root.level)
    assert configure("debug") is None
    assert (list(root.handlers), root.level) == before


def test_unknown_levels_are_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="choose one of debug, info, warning, error"):
        logs.level_of("verbose")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(
    msg: str, *args: object, level: int = logging.WARNING, name: str = "sidecar"
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_repeated_warnings_are_held_back_and_counted() -> None:
    clock = Clock()
    repeats = RepeatFilter(window_s=60, clock=clock)
    template = "record %s[%d]@%d goes to the dead-letter topic: %s"
    assert repeats.filter(record(template, "t", 0, 1, "not_otlp"))
    assert not any(repeats.filter(record(template, "t", 0, n, "not_otlp")) for n in range(2, 50))
    assert repeats.filter(record("another line"))
    clock.now = 61
    again = record(template, "t", 0, 99, "not_otlp")
    assert repeats.filter(again)
    assert again.getMessage().endswith("(48 more like this in the last 60s)")
    clock.now = 200
    quiet = record(template, "t", 0, 100, "not_otlp")
    assert repeats.filter(quiet)
    assert "more like this" not in quiet.getMessage()


def test_info_lines_always_pass_and_memory_is_bounded() -> None:
    repeats = RepeatFilter(window_s=60, memory=10, clock=Clock())
    assert all(repeats.filter(record("ready", level=logging.INFO)) for _ in range(5))
    for n in range(100):
        repeats.filter(record(f"distinct template {n}"))
    assert len(repeats._seen) == 10
