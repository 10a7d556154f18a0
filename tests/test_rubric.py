from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sidecar.errors import RubricError
from sidecar.evaluate.rubric import load_rubrics, parse_rubric, route
from tests.builders import criterion, judge_block, rubric, rubric_yaml

REPO_RUBRICS = Path(__file__).resolve().parents[1] / "rubrics"
FILE = Path("rubrics/refund.yaml")

CRITERION = criterion(
    "correct_amount",
    definition="The amount told equals the amount in the tool result.",
    pass_example="Your refund of $40 is on its way.",
    fail_example="You will get $45 back.",
)
# A valid rubric file; the parser's tests change its fields.
VALID: dict[str, Any] = {
    "id": "refund-support",
    "version": "3",
    "applies_to": {"service.name": "refund-agent"},
    "checks": [{"name": "allowed_tools", "type": "tool_allowlist", "tools": ["lookup_order"]}],
    "judge": judge_block(CRITERION, instructions="Grade it."),
}


def test_a_valid_rubric_parses_with_defaults() -> None:
    rubric = parse_rubric(rubric_yaml(VALID), FILE)
    assert rubric.id == "refund-support"
    assert rubric.sampling.judge_ratio == 0.05
    assert rubric.checks[0].gate is True
    assert rubric.judge_model == "gemini-2.5-flash"


@pytest.mark.parametrize(
    ("version", "text"),
    [
        pytest.param(3, "3", id="int"),
        pytest.param(3.1, "3.1", id="float"),
        pytest.param("2024-06-rc1", "2024-06-rc1", id="text"),
    ],
)
def test_version_is_kept_as_text(version: object, text: str) -> None:
    assert parse_rubric(rubric_yaml(VALID, version=version), FILE).version == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            rubric_yaml(
                VALID, checks=[{"name": "r", "type": "answer_regex", "must_match": "(refund"}]
            ),
            "checks.0.answer_regex: Value error, bad regular expression '(refund'",
            id="bad-regex",
        ),
        pytest.param(
            rubric_yaml(
                VALID, checks=[{"name": "r", "type": "answer_regex", "must_not_match": "[a-"}]
            ),
            "checks.0.answer_regex: Value error, bad regular expression '[a-'",
            id="bad-forbidden-regex",
        ),
        pytest.param(
            rubric_yaml(VALID, checks=[{"name": "r", "type": "answer_regex"}]),
            "checks.0.answer_regex: Value error, give must_match, must_not_match or both",
            id="regex-without-pattern",
        ),
        pytest.param(
            rubric_yaml(
                VALID,
                checks=[
                    {"name": "ok", "type": "no_error_spans"},
                    {
                        "name": "args",
                        "type": "tool_arguments",
                        "tool": "t",
                        "schema": {"type": "objekt"},
                    },
                ],
            ),
            "checks.1.tool_arguments.schema: Value error, not a valid JSON Schema",
            id="bad-tool-arguments-schema",
        ),
        pytest.param(
            rubric_yaml(
                VALID,
                checks=[{"name": "j", "type": "answer_json_schema", "schema": {"required": "id"}}],
            ),
            "checks.0.answer_json_schema.schema: Value error, not a valid JSON Schema",
            id="bad-answer-schema",
        ),
        pytest.param(
            rubric_yaml(VALID, checks=[{"name": "x", "type": "tool_whitelist", "tools": []}]),
            "checks.0: unknown check type 'tool_whitelist'; did you mean 'tool_denylist'?",
            id="unknown-check-type",
        ),
        pytest.param(
            rubric_yaml(VALID, checks=[{"name": "x", "type": "max_tool_calls", "limt": 3}]),
            "checks.0.max_tool_calls.limt: Extra inputs are not permitted",
            id="misspelt-field",
        ),
        pytest.param(
            rubric_yaml(VALID, checks=[{"name": "x", "type": "max_tool_calls", "limit": -1}]),
            "checks.0.max_tool_calls.limit: Input should be greater than or equal to 0",
            id="negative-limit",
        ),
        pytest.param(
            rubric_yaml(VALID, checks=[{"name": "x", "type": "required_tool_calls", "calls": []}]),
            "checks.0.required_tool_calls.calls: List should have at least 1 item",
            id="required-calls-empty",
        ),
        pytest.param(
            rubric_yaml(
                VALID,
                checks=[
                    {
                        "name": "x",
                        "type": "required_tool_calls",
                        "calls": [{"name": "a"}],
                        "order": "sorted",
                    }
                ],
            ),
            "checks.0.required_tool_calls.order: Input should be 'in_order' or 'any_order'",
            id="required-calls-bad-order",
        ),
        pytest.param(rubric_yaml(VALID, id=None), f"{FILE}: id: Field required", id="missing-id"),
        pytest.param(
            rubric_yaml(VALID, version=None),
            f"{FILE}: version: Field required",
            id="missing-version",
        ),
        pytest.param(
            rubric_yaml(VALID, id="refund support"),
            f"{FILE}: id: String should match pattern",
            id="id-with-space",
        ),
        pytest.param(
            rubric_yaml(
                VALID,
                checks=[
                    {"name": "a", "type": "no_error_spans"},
                    {"name": "a", "type": "no_error_spans"},
                ],
            ),
            "checks: Value error, duplicate check name 'a'",
            id="duplicate-check-names",
        ),
        pytest.param(
            rubric_yaml(
                VALID, judge=judge_block(criterion("c"), criterion("c"), instructions="Grade it.")
            ),
            "judge.criteria: Value error, duplicate criterion name 'c'",
            id="duplicate-criterion-names",
        ),
        pytest.param(
            rubric_yaml(VALID, judge=judge_block(instructions="Grade it.")),
            "judge.criteria: List should have at least 1 item",
            id="no-criteria",
        ),
        pytest.param(
            rubric_yaml(
                VALID,
                judge=judge_block(
                    *(criterion(f"c{n}") for n in range(9)), instructions="Grade it."
                ),
            ),
            "judge.criteria: List should have at most 8 items",
            id="nine-criteria",
        ),
        pytest.param(
            rubric_yaml(
                VALID,
                judge=judge_block({**CRITERION, "fail_example": ""}, instructions="Grade it."),
            ),
            "judge.criteria.0.fail_example: String should have at least 1 character",
            id="criterion-without-fail-example",
        ),
        pytest.param(
            rubric_yaml(VALID, sampling={"judge_ratio": 1.5}),
            "sampling.judge_ratio: Input should be less than or equal to 1",
            id="judge-ratio-above-one",
        ),
        pytest.param(
            rubric_yaml(VALID, sampling={"always_judge": ["sometimes"]}),
            "sampling.always_judge.0: Input should be",
            id="unknown-always-judge-reason",
        ),
        pytest.param(
            "- just\n- a list\n", f"{FILE}: (top level): expected a mapping", id="not-a-mapping"
        ),
        pytest.param("id: [unclosed\n", f"{FILE}: not valid YAML", id="not-yaml"),
    ],
)
def test_invalid_rubric_names_file_and_field(text: str, expected: str) -> None:
    with pytest.raises(RubricError) as caught:
        parse_rubric(text, FILE)
    message = str(caught.value)
    assert message.startswith(f"{FILE}: ")
    assert expected in message


def test_every_problem_in_a_file_is_reported() -> None:
    text = rubric_yaml(
        VALID,
        id=None,
        checks=[{"name": "r", "type": "answer_regex", "must_match": "("}],
        sampling={"judge_ratio": 2},
    )
    with pytest.raises(RubricError) as caught:
        parse_rubric(text, FILE)
    lines = str(caught.value).splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "id",
        "sampling.judge_ratio",
        "checks.0.answer_regex",
    ]


ROOT = {"gen_ai.agent.name": "refund-agent", "deployment.environment": "prod"}


@pytest.mark.parametrize(
    ("applies_to", "resource", "root", "applies"),
    [
        pytest.param({}, {}, {}, True, id="no-selector-matches-everything"),
        pytest.param(
            {"service.name": "refund-agent"},
            {"service.name": "refund-agent"},
            {},
            True,
            id="resource-attribute",
        ),
        pytest.param(
            {"service.name": "refund-agent"},
            {"service.name": "airline-agent"},
            {},
            False,
            id="resource-attribute-differs",
        ),
        pytest.param({"gen_ai.agent.name": "refund-agent"}, {}, ROOT, True, id="root-attribute"),
        pytest.param(
            {"gen_ai.agent.name": "airline-agent"}, {}, ROOT, False, id="root-attribute-differs"
        ),
        pytest.param(
            {"service.name": "refund-agent", "deployment.environment": "prod"},
            {"service.name": "refund-agent"},
            ROOT,
            True,
            id="keys-from-both-places",
        ),
        pytest.param(
            {"service.name": "refund-agent", "deployment.environment": "staging"},
            {"service.name": "refund-agent"},
            ROOT,
            False,
            id="every-key-must-match",
        ),
        pytest.param({"service.name": "refund-agent"}, {}, {}, False, id="attribute-absent"),
        pytest.param(
            {"service.version": "3"}, {"service.version": 3}, {}, True, id="compared-as-text"
        ),
        pytest.param(
            {"deployment.environment": "prod"},
            {"deployment.environment": "staging"},
            {"deployment.environment": "prod"},
            False,
            id="resource-wins-over-root",
        ),
    ],
)
def test_applies_to(
    applies_to: dict[str, str], resource: dict[str, Any], root: dict[str, Any], applies: bool
) -> None:
    assert rubric(applies_to=applies_to).applies(resource, root) is applies


def test_route_picks_every_matching_rubric_in_order() -> None:
    everything = rubric(id="all")
    refund = rubric(id="refund", applies_to={"service.name": "refund-agent"})
    airline = rubric(id="airline", applies_to={"service.name": "airline-agent"})
    chosen = route([everything, refund, airline], {"service.name": "refund-agent"}, {})
    assert [r.id for r in chosen] == ["all", "refund"]


def _write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text, encoding="utf-8")


def test_load_rubrics_reports_all_problems_together(tmp_path: Path) -> None:
    _write(tmp_path, "a-good.yaml", rubric_yaml(VALID, id="good"))
    _write(
        tmp_path,
        "b-bad-regex.yaml",
        rubric_yaml(
            VALID, id="b", checks=[{"name": "r", "type": "answer_regex", "must_match": "("}]
        ),
    )
    _write(tmp_path, "c-no-id.yml", rubric_yaml(VALID, id=None))
    _write(tmp_path, "d-twin.yaml", rubric_yaml(VALID, id="good"))
    _write(tmp_path, "notes.txt", "not a rubric")
    with pytest.raises(RubricError) as caught:
        load_rubrics(tmp_path)
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"{tmp_path / 'b-bad-regex.yaml'}: checks.0.answer_regex: ")
    assert lines[1] == f"{tmp_path / 'c-no-id.yml'}: id: Field required"
    assert lines[2] == (
        f"rubric id 'good' is used by 2 files: {tmp_path / 'a-good.yaml'}, {tmp_path / 'd-twin.yaml'}"
    )


def test_load_rubrics_reads_yaml_and_yml(tmp_path: Path) -> None:
    _write(tmp_path, "one.yaml", rubric_yaml(VALID, id="one"))
    _write(tmp_path, "two.yml", rubric_yaml(VALID, id="two"))
    assert [r.id for r in load_rubrics(tmp_path)] == ["one", "two"]


def test_load_rubrics_needs_at_least_one_file(tmp_path: Path) -> None:
    with pytest.raises(RubricError, match="no rubric files"):
        load_rubrics(tmp_path)


def test_load_rubrics_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(RubricError, match="not a directory"):
        load_rubrics(tmp_path / "missing")


def test_every_rubric_in_the_repo_loads() -> None:
    if not any(REPO_RUBRICS.glob("*.y*ml")):
        pytest.skip(f"no rubric files in {REPO_RUBRICS} yet")
    rubrics = load_rubrics(REPO_RUBRICS)
    for loaded in rubrics:
        assert loaded.applies_to, f"{loaded.id} applies to every trace"
        if loaded.judge is not None:
            assert 4 <= len(loaded.judge.criteria) <= 6, (
                f"{loaded.id}: a rubric has 4 to 6 criteria"
            )


@pytest.mark.parametrize(
    ("service", "rubric_id"),
    [
        pytest.param("refund-agent", "refund-support", id="refund"),
        pytest.param("airline-agent", "airline-booking", id="airline"),
    ],
)
def test_example_rubrics_route_by_service_name(service: str, rubric_id: str) -> None:
    if not (REPO_RUBRICS / f"{rubric_id}.yaml").is_file():
        pytest.skip(f"{rubric_id}.yaml not in {REPO_RUBRICS}")
    chosen = route(load_rubrics(REPO_RUBRICS), {"service.name": service}, {})
    assert [r.id for r in chosen] == [rubric_id]
