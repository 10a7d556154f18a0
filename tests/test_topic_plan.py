"""Which topics each command needs (`sidecar.topic_plan`), and `sidecar topics plan`'s table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sidecar.cli import main
from sidecar.settings import Settings
from sidecar.topic_plan import TopicSpec, for_backfill, for_run, plan
from tests.builders import rubric
from tests.conversation_builders import conversation_rubric

TRACE_RUBRIC = rubric({"id": "plain", "checks": []})


def fields(specs: list[TopicSpec]) -> list[str]:
    return [s.field for s in specs]


def test_run_needs_no_conversation_topics_without_a_conversation_rubric() -> None:
    specs = plan(Settings())
    assert len(specs) == 9  # plan lists everything the configuration may use
    assert fields(for_run(specs, [TRACE_RUBRIC])) == [
        "kafka.topic",
        "kafka.logs_topic",
        "kafka.dead_letter_topic",
        "kafka.verdict_topic",
        "review.topic",
        "review.labels_topic",
    ]


def test_run_needs_the_conversation_topics_with_a_conversation_rubric() -> None:
    needed = fields(for_run(plan(Settings()), [TRACE_RUBRIC, conversation_rubric()]))
    assert "conversations.topic" in needed
    assert "conversations.state_topic" in needed
    assert "kafka.backfill_verdict_topic" not in needed


def test_conversations_off_means_no_conversation_topics_even_with_the_rubric() -> None:
    specs = plan(
        Settings.model_validate({"conversations": {"enabled": False}, "review": {"enabled": False}})
    )
    needed = fields(for_run(specs, [conversation_rubric()]))
    assert not any(f.startswith(("conversations.", "review.")) for f in needed)


def test_backfill_needs_the_spans_the_dead_letters_and_its_verdicts() -> None:
    assert fields(for_backfill(plan(Settings()))) == [
        "kafka.topic",
        "kafka.dead_letter_topic",
        "kafka.backfill_verdict_topic",
    ]


def test_topics_plan_says_which_command_uses_each_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump({"kafka": {"topic": "spans"}}))
    assert main(["topics", "plan", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "USED BY" in lines[0]
    column = lines[0].index("USED BY")

    def used_by(topic: str) -> str:
        row = next(line for line in lines if line.split()[0] == topic)
        return row[column:].split("  ")[0].strip()

    assert used_by("spans") == "run, backfill"
    assert used_by("otlp_spans.dlq") == "run, backfill"
    assert used_by("eval_verdicts") == "run"
    assert used_by("eval_verdicts_backfill") == "backfill"
    assert used_by("eval_turns") == "run (with a scope: conversation rubric)"
    assert used_by("eval_conversations") == "run (with a scope: conversation rubric)"
