"""Redaction of the verdict and review records (sidecar.wire.redaction): modes, patterns, settings, wiring."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.calibrate.review import review_record
from sidecar.cli import main
from sidecar.commands.demo import demo_data
from sidecar.errors import ConfigError
from sidecar.evaluate.verdict import Verdict, make_verdict
from sidecar.model import CheckResult, CriterionResult, Outcome, Transcript
from sidecar.settings import RedactionSettings, Settings, load_settings
from sidecar.wire import read_records
from sidecar.wire.redaction import (
    DEFAULT_REDACTION,
    NO_REDACTION,
    Content,
    Redaction,
    content_hash,
    luhn_valid,
)
from sidecar.wire.reviews import ReviewRecord
from sidecar.wire.verdicts import VerdictRecord, verdict_dict, verdict_json
from tests.builders import span_id, tool_call, transcript
from tests.service_rig import make_rig, run_until_idle_then_stop

EMAIL = "ann.lee+shop@example.co.uk"
CARD = "4111 1111 1111 1111"  # a Visa test number: passes Luhn
ORDER = "4111 1111 1111 1112"  # same length, fails Luhn: an order number
SECRET = f"mail {EMAIL}, card {CARD}, order {ORDER}"
MASKED = "mail [email], card [card_number], order " + ORDER

TRANSCRIPT = transcript(
    tool_call("lookup", f'{{"q": "{SECRET}"}}', f"result {SECRET}", error=f"err {SECRET}"),
    user_input=f"input {SECRET}",
    answer=f"answer {SECRET}",
    agent_name="shop",
    models=("m",),
)


def _verdict(t: Transcript = TRANSCRIPT) -> Verdict:
    return make_verdict(
        t,
        rubric_id="r",
        rubric_version="1",
        judge_model="j",
        checks=[CheckResult("c", Outcome.FAIL, True, f"answer matches at {SECRET!r}")],
        criteria=[
            CriterionResult("k", Outcome.PASS, True, f"evidence {SECRET}", None),
            CriterionResult("k2", Outcome.ERROR, True, None, "missing"),
        ],
        judged=True,
        sample_reason="ratio",
        judge_error="timeout",
        raw_output=f'{{"raw": "{SECRET}"}}',
    )


VERDICT = _verdict()


def _review(redaction: Redaction) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(review_record(VERDICT, TRANSCRIPT, ("audit",), redaction))
    return data


# Every content field of both records: how to read it from the review record JSON, and its raw value.
Getter = Callable[[dict[str, Any]], Any]
FIELDS: list[tuple[str, Getter, str]] = [
    ("verdict.raw_output", lambda r: r["verdict"].get("raw_output"), VERDICT.raw_output or ""),
    (
        "verdict.criteria.evidence",
        lambda r: r["verdict"]["criteria"][0].get("evidence"),
        f"evidence {SECRET}",
    ),
    (
        "verdict.checks.detail",
        lambda r: r["verdict"]["checks"][0]["detail"],
        f"answer matches at {SECRET!r}",
    ),
    ("transcript.user_input", lambda r: r["transcript"]["user_input"], f"input {SECRET}"),
    ("transcript.answer", lambda r: r["transcript"]["answer"], f"answer {SECRET}"),
    (
        "transcript.tool_calls.arguments",
        lambda r: r["transcript"]["tool_calls"][0]["arguments"],
        f'{{"q": "{SECRET}"}}',
    ),
    (
        "transcript.tool_calls.result",
        lambda r: r["transcript"]["tool_calls"][0]["result"],
        f"result {SECRET}",
    ),
    (
        "transcript.tool_calls.error",
        lambda r: r["transcript"]["tool_calls"][0]["error"],
        f"err {SECRET}",
    ),
]
MODES: list[tuple[str, Redaction, Callable[[str], str | None]]] = [
    ("none", NO_REDACTION, lambda raw: raw),
    ("default-patterns", DEFAULT_REDACTION, lambda raw: raw.replace(SECRET, MASKED)),
    ("hash", Redaction.build("hash", ["email"]), content_hash),
    ("drop", Redaction.build("drop", ["email"]), lambda raw: None),
]


@pytest.mark.parametrize(("mode", "redaction", "expect"), MODES, ids=[m[0] for m in MODES])
@pytest.mark.parametrize(("field", "get", "raw"), FIELDS, ids=[f[0] for f in FIELDS])
def test_each_mode_on_each_content_field(
    mode: str,
    redaction: Redaction,
    expect: Callable[[str], str | None],
    field: str,
    get: Getter,
    raw: str,
) -> None:
    assert get(_review(redaction)) == expect(raw)


@pytest.mark.parametrize(("mode", "redaction", "expect"), MODES, ids=[m[0] for m in MODES])
def test_verdict_record_alone_is_redacted_like_the_one_in_the_review_record(
    mode: str, redaction: Redaction, expect: Callable[[str], str | None]
) -> None:
    assert json.loads(verdict_json(VERDICT, redaction)) == _review(redaction)["verdict"]
    assert verdict_dict(VERDICT, redaction) == _review(redaction)["verdict"]


@pytest.mark.parametrize(("mode", "redaction", "expect"), MODES, ids=[m[0] for m in MODES])
def test_ids_names_outcomes_and_provenance_are_never_touched(
    mode: str, redaction: Redaction, expect: Callable[[str], str | None]
) -> None:
    kept, redacted = _review(NO_REDACTION), _review(redaction)
    for record in (kept, redacted):
        record["verdict"].pop("raw_output", None)
        for c in record["verdict"]["checks"]:
            c.pop("detail")
        for c in record["verdict"]["criteria"]:
            c.pop("evidence", None)
        for name in ("user_input", "answer"):
            record["transcript"].pop(name)
        for call in record["transcript"]["tool_calls"]:
            for name in ("arguments", "result", "error"):
                call.pop(name)
        for part in ("verdict", "transcript"):
            record[part].pop("redacted", None)
    assert redacted == kept
    assert redacted["verdict"]["id"] == VERDICT.id
    assert redacted["verdict"]["criteria"][1]["reason"] == "missing"
    assert redacted["verdict"]["judge_error"] == "timeout"


def test_drop_leaves_fields_absent_or_null_and_says_so() -> None:
    record = _review(Redaction.build("drop", []))
    verdict, t = record["verdict"], record["transcript"]
    assert "raw_output" not in verdict
    assert "evidence" not in verdict["criteria"][0]
    assert verdict["checks"][0]["detail"] is None
    assert (t["user_input"], t["answer"]) == (None, None)
    assert t["tool_calls"][0] == {
        "name": "lookup",
        "call_id": None,
        "arguments": None,
        "result": None,
        "error": None,
        "untrusted": False,
    }
    assert verdict["redacted"] == t["redacted"] == "drop"
    assert SECRET not in json.dumps(record)
    assert EMAIL not in json.dumps(record)


def test_hash_matches_equal_values_without_showing_them() -> None:
    record = _review(Redaction.build("hash", []))
    digest = hashlib.sha256(f"input {SECRET}".encode()).hexdigest()
    assert record["transcript"]["user_input"] == "sha256:" + digest[:16]
    assert content_hash("same") == content_hash("same") != content_hash("Same")
    assert record["verdict"]["redacted"] == record["transcript"]["redacted"] == "hash"
    assert EMAIL not in json.dumps(record)


def test_not_captured_stays_not_captured_in_every_mode() -> None:
    t = transcript(tool_call("t", None, None), user_input=None, answer=None)
    for redaction in (DEFAULT_REDACTION, Redaction.build("hash", [])):
        out = json.loads(review_record(_verdict(t), t, ("audit",), redaction))["transcript"]
        assert (out["user_input"], out["answer"], out["tool_calls"][0]["arguments"]) == (
            None,
            None,
            None,
        )


def test_redacted_records_read_back() -> None:
    lines = [verdict_json(VERDICT, Redaction.build(m, [])) for m in ("keep", "hash", "drop")]
    records = [r for _, r in read_records(lines, "v", VerdictRecord)]
    assert [r.redacted for r in records] == [None, "hash", "drop"]
    assert {r.key for r in records} == {VERDICT.id}
    review = ReviewRecord.model_validate(_review(Redaction.build("drop", [])))
    assert review.transcript.redacted == "drop"


def test_nothing_to_redact_writes_the_record_as_before() -> None:
    plain = transcript(tool_call("t", '{"a": 1}', "ok 12"), user_input="hi", answer="order 42")
    v = _verdict(plain)
    v = dataclasses.replace(
        v,
        checks=(CheckResult("c", Outcome.PASS, True, "latency 1.2 s <= limit 2 s"),),
        criteria=(CriterionResult("k", Outcome.PASS, True, "said 42", None),),
        raw_output='{"k": "PASS"}',
    )
    assert verdict_json(v) == verdict_json(v, NO_REDACTION)
    assert review_record(v, plain, ("audit",)) == review_record(v, plain, ("audit",), NO_REDACTION)
    assert "redacted" not in verdict_json(v)


# -- patterns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patterns", "text", "expected"),
    [
        pytest.param(["email"], f"to {EMAIL}.", "to [email].", id="email"),
        pytest.param(["email"], "a@b is no address", "a@b is no address", id="email-no-domain"),
        pytest.param(["card_number"], f"c {CARD}", "c [card_number]", id="card-spaces"),
        pytest.param(["card_number"], "c 4111-1111-1111-1111", "c [card_number]", id="card-dashes"),
        pytest.param(["card_number"], "c 4111111111111111", "c [card_number]", id="card-plain"),
        pytest.param(["card_number"], "amex 378282246310005", "amex [card_number]", id="card-15"),
        pytest.param(["card_number"], f"order {ORDER}", f"order {ORDER}", id="order-fails-luhn"),
        pytest.param(
            ["card_number"], "id 4111111111111112", "id 4111111111111112", id="order-plain"
        ),
        pytest.param(
            ["card_number"], "n 41111111111111110000", "n 41111111111111110000", id="too-long"
        ),
        pytest.param(["card_number"], "n 411111111111", "n 411111111111", id="too-short"),
        pytest.param(["phone"], "call +44 20 7946 0958.", "call [phone].", id="phone"),
        pytest.param(
            ["phone"], "on 2024-01-01 at 3.14159", "on 2024-01-01 at 3.14159", id="no-phone"
        ),
        pytest.param(["regex:SKU-[0-9]+"], "item SKU-123 ok", "item [redacted] ok", id="custom"),
        pytest.param(["email", "regex:\\[email\\]"], f"to {EMAIL}", "to [redacted]", id="in-order"),
        pytest.param([], f"to {EMAIL}", f"to {EMAIL}", id="no-patterns"),
    ],
)
def test_patterns(patterns: list[str], text: str, expected: str) -> None:
    assert Redaction.build(Content.KEEP, patterns).text(text) == expected


@pytest.mark.parametrize(
    ("digits", "valid"),
    [("4111111111111111", True), ("4111111111111112", False), ("79927398713", True), ("0", True)],
)
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn_valid(digits) is valid


# -- settings --------------------------------------------------------------------------------


def test_default_settings_mask_an_email_in_a_tool_result_of_the_review_record() -> None:
    policy = Settings().redaction.policy()
    t = transcript(tool_call("crm", '{"id": 7}', f"customer {EMAIL}"))
    out = json.loads(review_record(_verdict(t), t, ("audit",), policy))
    assert out["transcript"]["tool_calls"][0]["result"] == "customer [email]"
    assert policy == DEFAULT_REDACTION == RedactionSettings().policy()
    assert (RedactionSettings().content, RedactionSettings().patterns) == (
        Content.KEEP,
        ("email", "card_number"),
    )


def _settings_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sidecar.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_redaction_is_read_from_the_file(tmp_path: Path) -> None:
    path = _settings_file(
        tmp_path, "redaction:\n  content: hash\n  patterns: [phone, 'regex:SKU-\\d+']\n"
    )
    settings = load_settings(path)
    assert settings.redaction.content is Content.HASH
    assert settings.redaction.policy().text("x") == content_hash("x")


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        pytest.param(
            "redaction:\n  patterns: [email, 'regex:(?<=a)b']\n",
            "redaction.patterns: patterns[1]: 'regex:(?<=a)b': RE2 cannot compile",
            id="regex-re2-refuses",
        ),
        pytest.param(
            "redaction:\n  patterns: [ssn]\n",
            "redaction.patterns: patterns[0]: unknown pattern 'ssn'",
            id="unknown-name",
        ),
        pytest.param(
            "redaction:\n  patterns: ['regex:']\n",
            "patterns[0]: 'regex:': empty regular expression",
            id="empty-regex",
        ),
        pytest.param(
            "redaction:\n  content: burn\n", "redaction.content: Input should be", id="bad-mode"
        ),
    ],
)
def test_bad_redaction_settings_are_a_config_error_naming_the_field(
    tmp_path: Path, yaml_text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match="invalid configuration") as caught:
        load_settings(_settings_file(tmp_path, yaml_text))
    assert message in str(caught.value)


# -- the service honours the setting ---------------------------------------------------------


def _error_span_record(message: str) -> bytes:
    span = {
        "traceId": "ab" * 16,
        "spanId": span_id(1),
        "name": "invoke_agent shop",
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
        "status": {"code": 2, "message": message},
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]}
    request = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(request).encode()


@pytest.mark.parametrize(
    ("redaction", "detail"),
    [
        pytest.param(None, "error span 'invoke_agent shop': no account for [email]", id="default"),
        pytest.param({"content": "keep", "patterns": []}, f"no account for {EMAIL}", id="none"),
        pytest.param({"content": "drop"}, None, id="drop"),
    ],
)
async def test_the_service_writes_verdict_records_under_its_redaction_setting(
    redaction: dict[str, Any] | None, detail: str | None
) -> None:
    rig = make_rig(**({"redaction": redaction} if redaction else {}))
    rig.topic.append(0, _error_span_record(f"no account for {EMAIL}"))
    await run_until_idle_then_stop(rig)
    [(_, payload)] = rig.sink.verdicts
    record = json.loads(payload)
    got = record["checks"][0]["detail"]
    if detail is None:
        assert got is None
        assert record["redacted"] == "drop"
    else:
        assert got.endswith(detail)


# -- sidecar replay honours --config ---------------------------------------------------------


@pytest.mark.usefixtures("no_judge_credentials")
def test_replay_writes_verdict_records_under_the_configured_redaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, rubrics = demo_data()

    def run(*config: Path) -> list[dict[str, Any]]:
        argv = ["replay", str(traces), "--rubrics", str(rubrics), "--exit-zero"]
        assert main([*argv, *(a for c in config for a in ("--config", str(c)))]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    kept = run()
    hashed = run(_settings_file(tmp_path, "redaction:\n  content: hash\n"))
    assert [r["id"] for r in hashed] == [r["id"] for r in kept]
    assert [r["outcome"] for r in hashed] == [r["outcome"] for r in kept]
    pairs = [
        (k["detail"], h["detail"])
        for a, b in zip(kept, hashed, strict=True)
        for k, h in zip(a["checks"], b["checks"], strict=True)
    ]
    assert pairs
    assert all(h == content_hash(k) for k, h in pairs)
    assert {r.get("redacted") for r in kept} == {None}
    assert {r["redacted"] for r in hashed} == {"hash"}
