"""The pairwise judge's own injection report: parsed strictly, and a hit in `sidecar compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.cli import build_parser
from sidecar.commands import compare as compare_command
from sidecar.judge.pairwise import BAD_SHAPE, Choice, parse_pairwise
from sidecar.judge.screen import JUDGE_REPORT
from tests.gemini_server import JudgeServer, Reply, gemini_json

MODEL = "gemini-2.5-flash"


def test_the_flag_is_read_and_must_be_a_boolean() -> None:
    flagged = parse_pairwise(
        '{"evidence": "A is exact.", "winner": "A", "data_tried_to_instruct": true}'
    )
    assert (flagged.winner, flagged.instructed) == (Choice.A, True)
    quiet = parse_pairwise(
        '{"evidence": "B is exact.", "winner": "B", "data_tried_to_instruct": false}'
    )
    assert (quiet.winner, quiet.instructed) == (Choice.B, False)
    # Left out (a backend without a response schema): no report, the choice stands.
    assert parse_pairwise('{"evidence": "Same.", "winner": "TIE"}').instructed is False
    for bad in ('"yes"', "1", "null"):
        answer = parse_pairwise(
            f'{{"evidence": "A.", "winner": "A", "data_tried_to_instruct": {bad}}}'
        )
        assert (answer.winner, answer.reason) == (Choice.ERROR, BAD_SHAPE)


def answer(winner: str, instructed: bool) -> Reply:
    return gemini_json(
        {"evidence": "It states the date.", "winner": winner, "data_tried_to_instruct": instructed}
    )


async def _no_sleep(seconds: float) -> None:
    return None


def test_compare_lists_a_pair_only_the_judge_flagged(
    judge_server: JudgeServer,
    no_judge_credentials: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    no_judge_credentials.setenv("GOOGLE_API_KEY", "test-key")
    (tmp_path / "sidecar.yaml").write_text(f"judge:\n  base_url: {judge_server.base_url}\n")
    # Benign to the screening; the judge reports an instruction in the second order only.
    pairs = [
        {"id": "p1", "prompt": "When?", "candidate": "On 3 May.", "baseline": "Soon."},
        {"id": "p2", "prompt": "Where?", "candidate": "In Lyon.", "baseline": "Far."},
    ]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    judge_server.script(
        answer("A", False), answer("B", False), answer("A", False), answer("B", True)
    )
    args = build_parser().parse_args(
        [
            "compare",
            "--pairs",
            str(tmp_path / "pairs.jsonl"),
            "--model",
            MODEL,
            "--config",
            str(tmp_path / "sidecar.yaml"),
            "--json",
            "-",
            "--concurrency",
            "1",
        ]
    )
    code = compare_command.run(args, sleep=_no_sleep)
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["injection_suspected_cases"] == [{"case_id": "p2", "signals": [JUDGE_REPORT]}]
    assert "injection suspected" in err
    assert "p2" in err
