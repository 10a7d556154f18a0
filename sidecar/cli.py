"""The ``sidecar`` command line. Exit codes: 0 ok, 1 check/gate/validation failed, 2 usage/config error."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from sidecar import __version__
from sidecar.errors import ConfigError, RubricError, SidecarError

# Order is the order of `sidecar --help`.
COMMANDS = ("run", "replay", "demo", "judge", "rubrics", "calibrate", "gate", "compare")

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="OpenTelemetry-native online evaluator for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"sidecar {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"sidecar.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except (ConfigError, RubricError) as exc:
        print(f"sidecar: {exc}", file=sys.stderr)
        return 2
    except SidecarError as exc:
        print(f"sidecar: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
