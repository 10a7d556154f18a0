"""Conversations from a real google-adk 2 agent: several turns in one session, replayed.

ADK 2 puts the session id on the root span as ``gen_ai.conversation.id``; each
turn is its own invocation and trace. A refund in turn 2 for an order looked up
in turn 1 passes ``required_tool_calls`` and ``grounded_numbers`` over the
conversation, though it fails both as a trace of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sidecar.ingest.decode import decode
from tests.agents.adk_traces import adk2_session_lines
from tests.builders import rubric_yaml
from tests.conversation_builders import refund_checks, refund_conversation_yaml

SESSIONS = ("adk-session-blender", "adk-session-lamp")
CHECKS = refund_checks({"name": "few_turns", "type": "max_turns", "limit": 5})


def write_rubrics(folder: Path) -> Path:
    folder.mkdir()
    (folder / "conversation.yaml").write_text(refund_conversation_yaml(300, CHECKS))
    (folder / "trace.yaml").write_text(rubric_yaml(id="refund-trace", version="1", checks=CHECKS))
    return folder


def test_adk_sets_the_session_as_conversation_id_on_each_turns_root() -> None:
    lines = adk2_session_lines(SESSIONS)
    assert len(lines) == 5
    roots = [next(s for s in decode(line.encode()) if s.parent_span_id is None) for line in lines]
    assert [r.attributes.get("gen_ai.conversation.id") for r in roots] == [
        "session-0101",
        "session-0101",
        "session-0101",
        "session-0102",
        "session-0102",
    ]
    assert len({r.trace_id for r in roots}) == 5


def test_replay_judges_each_adk_session_as_one_conversation(tmp_path: Path) -> None:
    traces = tmp_path / "turns.jsonl"
    traces.write_text("".join(line + "\n" for line in adk2_session_lines(SESSIONS)))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sidecar",
            "replay",
            str(traces),
            "--rubrics",
            str(write_rubrics(tmp_path / "rubrics")),
            "--exit-zero",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    conversations = {r["conversation_id"]: r for r in records if r.get("scope") == "conversation"}
    assert set(conversations) == {"session-0101", "session-0102"}
    blender, lamp = conversations["session-0101"], conversations["session-0102"]
    assert (blender["turns"], lamp["turns"]) == (3, 2)
    assert blender["outcome"] == "acceptable"
    assert {c["name"]: c["outcome"] for c in blender["checks"]} == {
        "lookup_then_refund": "PASS",
        "amount_grounded": "PASS",
        "few_turns": "PASS",
    }
    lamp_checks = {c["name"]: c for c in lamp["checks"]}
    assert lamp_checks["amount_grounded"]["outcome"] == "FAIL"
    assert lamp_checks["amount_grounded"]["detail"].startswith("turn 2 of 2:")
    assert "54.25" in lamp_checks["amount_grounded"]["detail"]
    # Per trace, the refund turn alone misses its lookup.
    refund_turn = blender["trace_ids"][1]
    [alone] = [
        r for r in records if r["trace_id"] == refund_turn and r["rubric_id"] == "refund-trace"
    ]
    assert {c["name"]: c["outcome"] for c in alone["checks"]}["lookup_then_refund"] == "FAIL"
    assert "2 conversations" in done.stderr
