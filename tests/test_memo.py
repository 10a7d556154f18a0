"""Parsing messages with a per-trace memo gives exactly what parsing without one gives."""

from __future__ import annotations

import json
import random

import pytest

from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import parse_messages


def _history(rng: random.Random, n: int) -> list[dict[str, object]]:
    roles = ["user", "assistant", "tool"]
    items: list[dict[str, object]] = []
    for i in range(n):
        item: dict[str, object] = {"parts": [{"type": "text", "content": f"m{i} {rng.random()}"}]}
        if rng.random() < 0.8:
            item["role"] = rng.choice(roles)
        items.append(item)
    return items


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["compact", "spaced"])
def test_growing_histories_parse_the_same(seed: int, separators: tuple[str, str]) -> None:
    rng = random.Random(seed)
    memo = MessageMemo()
    history = _history(rng, 12)
    for end in range(1, len(history) + 1):
        text = json.dumps(history[:end], separators=separators)
        role = rng.choice(["user", "assistant"])
        assert parse_messages(text, role, memo) == parse_messages(text, role)


@pytest.mark.parametrize(
    "texts",
    [
        pytest.param(["[1, 12]", "[1, 123]"], id="prefix-digits"),
        pytest.param(['["a"]', '["a", "b"]', '["ab"]'], id="prefix-strings"),
        pytest.param(
            ['[{"role":"user","content":"x"}]', '[{"role":"user","content":"x"} ]'], id="space"
        ),
        pytest.param(["[]", "[", "not json", '{"role": "user"}'], id="odd-shapes"),
    ],
)
def test_tricky_sequences_parse_the_same(texts: list[str]) -> None:
    memo = MessageMemo()
    for text in texts:
        for role in ("user", "assistant"):
            assert parse_messages(text, role, memo) == parse_messages(text, role)
