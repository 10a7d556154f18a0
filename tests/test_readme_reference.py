"""The README's commands table and the configuration reference agree with the code.

The commands table is checked option by option against argparse; the
configuration reference (docs/configuration.md) is generated from ``Settings``
(tests/config_reference.py) and must be what the generator writes now; every
key of the README's example configuration is a real setting.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from sidecar.cli import COMMANDS, build_parser
from sidecar.settings import Settings
from tests.config_reference import leaves, render

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def rows() -> dict[str, str]:
    """First cell of each commands-table row, keyed by its command (``topics plan`` when nested)."""
    found: dict[str, str] = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `(sidecar [^`]*)` \|", line)
        if match:
            cell = match.group(1)
            words = cell.split()[1:3]
            nested = " ".join(words)
            found[nested if nested in PARSERS else words[0]] = cell
    return found


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, by name (``rubrics check`` for nested actions)."""
    parser = build_parser()
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(prefix: str, node: argparse.ArgumentParser) -> None:
        subs = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[prefix] = node
            return
        for name, child in subs[0].choices.items():
            walk(f"{prefix} {name}".strip(), child)

    walk("", parser)
    return found


PARSERS = commands()


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
        if option.startswith("--")
    }


def test_every_command_has_a_row_and_every_row_a_command() -> None:
    assert {name.split()[0] for name in PARSERS} == set(COMMANDS)
    assert set(rows()) == set(PARSERS)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_row_names_exactly_the_options_of_its_command(name: str) -> None:
    cell = rows()[name]
    written = set(re.findall(r"--[a-z][a-z0-9-]*", cell))
    assert written == options(PARSERS[name]), f"README row for `sidecar {name}`: {cell}"


def test_the_configuration_reference_is_generated_from_the_settings() -> None:
    written = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert written == render(), (
        "docs/configuration.md is out of date: python -m tests.config_reference "
        "> docs/configuration.md"
    )


def test_every_key_of_the_readme_example_configuration_is_a_setting() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Configuration") :]
    block = section[section.index("```yaml") + len("```yaml") : section.index("```\n", 8)]
    known = {path for path, _ in leaves(Settings)}

    def paths(node: object, prefix: str = "") -> list[str]:
        if isinstance(node, dict):
            found = []
            for key, value in node.items():
                path = f"{prefix}{key}"
                found += paths(value, f"{path}.") if isinstance(value, dict) else [path]
            return found
        return []

    example = paths(yaml.safe_load(block))
    assert example, "no example configuration found in the README"
    # A mapping-valued setting (judge.prices) takes keys of the user's choosing.
    unknown = [
        path
        for path in example
        if path not in known and not any(path.startswith(f"{k}.") for k in known)
    ]
    assert not unknown, f"README example names settings that do not exist: {unknown}"
