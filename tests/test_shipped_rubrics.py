"""Every rubric the repository ships: its fingerprint matches, and one id and version mean one content."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sidecar.drift.fingerprint import FingerprintStatus, check_fingerprint
from sidecar.evaluate.rubric import Rubric, load_rubric

ROOT = Path(__file__).resolve().parent.parent


def shipped() -> list[Path]:
    """Tracked YAML files with a top-level ``id:`` (the rubrics, wherever they live)."""
    listed = subprocess.run(
        ["git", "ls-files", "*.yaml", "*.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if not name.startswith("tests/")
        and any(line.startswith("id:") for line in (ROOT / name).read_text().splitlines())
    ]


SHIPPED = shipped()


def test_the_repository_ships_rubrics_in_several_places() -> None:
    places = {path.parent.relative_to(ROOT).as_posix() for path in SHIPPED}
    assert {"rubrics", "sidecar/demo_data/rubrics"} <= places


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_shipped_rubric_carries_a_matching_fingerprint(path: Path) -> None:
    rubric = load_rubric(path)
    result = check_fingerprint(rubric)
    assert result.status is FingerprintStatus.MATCHES, result.message


def test_one_id_and_version_mean_one_content_across_the_repository() -> None:
    seen: dict[tuple[str, str], tuple[Path, Rubric]] = {}
    for path in SHIPPED:
        rubric = load_rubric(path)
        key = (rubric.id, rubric.version)
        if key in seen:
            other_path, other = seen[key]
            assert other.content_hash == rubric.content_hash, (
                f"{path} and {other_path} are both {rubric.id} v{rubric.version} "
                "with different content; give one a distinct id or version"
            )
        seen[key] = (path, rubric)
