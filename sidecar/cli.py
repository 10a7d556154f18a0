"""The ``sidecar`` command line.

Commands return 0 (ok) or 1 (a check, gate or validation failed: a finding)
and raise for everything else. Errors become exit codes and one line on stderr
here, and only here (:func:`exit_code`, :func:`report`):

    error class                               exit  why
    UsageError: ConfigError, RubricError,       2   the user fixes an argument,
      InputFileError, RecordError                   a setting or a file
    any other SidecarError (SourceError, ...)   1   the run itself failed
    KeyboardInterrupt                         130   stopped by Ctrl-C

The line is ``PREFIX: MESSAGE``; ``PREFIX`` is ``sidecar``, or the command's
own name (``sidecar calibrate``) when its ``register`` sets ``error_prefix``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from sidecar import __version__
from sidecar.errors import SidecarError, UsageError
from sidecar.logs import shown

# Order is the order of `sidecar --help`.
COMMANDS = (
    "run",
    "replay",
    "demo",
    "check",
    "judge",
    "rubrics",
    "calibrate",
    "gate",
    "compare",
    "diff",
    "canary",
    "drift",
    "backfill",
    "topics",
)

Handler = Callable[[argparse.Namespace], int]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of command ``only`` (its module alone is imported)."""
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="OpenTelemetry-native online evaluator for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"sidecar {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"sidecar.commands.{name}")
        module.register(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command named first in ``argv``, when it is one (then only its module is loaded)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def exit_code(exc: SidecarError) -> int:
    """The exit code of an error that reached the command line."""
    match exc:
        case UsageError():  # ConfigError, RubricError, InputFileError, RecordError
            return 2
        case _:  # SourceError, DeliveryError and anything else raised on purpose
            return 1


def report(exc: SidecarError, args: argparse.Namespace) -> int:
    """Print the one line for ``exc`` and return its exit code."""
    prefix: str = getattr(args, "error_prefix", "sidecar")
    # Messages may quote what a file held: control characters shown, line breaks kept.
    text = "\n".join(shown(line) for line in str(exc).split("\n"))
    print(f"{prefix}: {text}", file=sys.stderr)
    return exit_code(exc)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # without importing any command
        print(f"sidecar {__version__}")
        return 0
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return call(args, lambda: handler(args))


def call(args: argparse.Namespace, run: Callable[[], int]) -> int:
    """Run a command (``run`` calls its handler); map what it raises to a line and an exit code."""
    try:
        return run()
    except SidecarError as exc:
        return report(exc, args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
