"""The README's "Install and run without containers" block, run as written.

The block is taken from README.md itself and run by bash in a copy of the
checkout, with ``HOME`` in a temporary folder (so ``$HOME/.sidecar`` is new),
``KAFKA`` the test broker and ``OTELCOL`` the Collector the test command built.
It installs the package with pip, writes the configuration, checks it, creates
the topics, starts the service and a Collector, sends one traced agent run,
waits for its verdict in the metrics and stops both. Every step must succeed
(``bash -e``), and the service must exit 0 on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.realparts import otelcol

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Install and run without containers"


def quickstart() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    match = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert match, f"README.md: no sh block under {SECTION!r}"
    return match.group(1)


def checkout_copy(into: Path) -> Path:
    """The tracked files of the checkout, as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            target = into / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def test_the_readme_quickstart_runs_as_written(tmp_path: Path, kafka_bootstrap: str) -> None:
    collector = str(otelcol())
    checkout = checkout_copy(tmp_path / "checkout")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SIDECAR_", "OTEL_", "VIRTUAL_ENV"))
    }
    env.update(
        HOME=str(home),
        KAFKA=kafka_bootstrap,
        OTELCOL=collector,
        # The package downloads stay cached between runs, as on a user's machine.
        PIP_CACHE_DIR=str(Path.home() / ".cache" / "pip"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    script = tmp_path / "quickstart.sh"
    script.write_text(quickstart(), encoding="utf-8")
    done = subprocess.run(
        ["timeout", "540", "bash", "-e", str(script)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}"
    assert re.search(r'^sidecar_cases_total\{.*rubric="refund-support"', done.stdout, re.M)
    assert "run would start with these settings" in done.stdout
    assert (home / ".sidecar" / "bin" / "sidecar").is_file()
