"""A service without a judge never loads google-genai (~40 MB and seconds of start-up per worker)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import sys
import sidecar.cli
sidecar.cli.build_parser()  # every command module, as `sidecar run` loads them
import sidecar.engine.replica, sidecar.commands.run
from sidecar.settings import JudgeSettings
from sidecar.commands._wiring import build_judge
assert build_judge(JudgeSettings(), None, environ={}) is None
print("google.genai" in sys.modules)
"""


def test_the_service_without_credentials_does_not_import_google_genai() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False", out.stderr


def test_building_a_judge_loads_it() -> None:
    probe = PROBE.replace("environ={}) is None", "environ=os.environ) is not None")
    out = subprocess.run(
        [sys.executable, "-c", "import os\n" + probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "GOOGLE_API_KEY": "test-key"},
    )
    assert out.stdout.strip() == "True", out.stderr
