"""Hypothesis strategies and settings for the fuzz and property suite (tests/test_fuzz_*.py).

Values are what a hostile producer, agent, user or web page could put in a
trace: random, deep, huge and ill-typed. Deep values are built iteratively
(as text, or as nested lists and dicts) so that building them never recurses.

``FUZZ`` is the suite's setting: deterministic examples (``derandomize``), no
example database written into the work tree, and a per-example deadline that
makes "bounded time" part of every property. ``SIDECAR_FUZZ_EXAMPLES`` raises
the number of examples for a deeper local run; ``SIDECAR_FUZZ_SEED=random``
draws new examples each run instead of the fixed ones.
"""

from __future__ import annotations

import json
import os
import string
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sidecar.bounds import MAX_NESTING, value_depth

EXAMPLES = int(os.environ.get("SIDECAR_FUZZ_EXAMPLES", "60"))

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=5),
    derandomize=os.environ.get("SIDECAR_FUZZ_SEED") != "random",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# For properties over a registry (every check type, every convention): more examples.
FUZZ_WIDE = settings(FUZZ, max_examples=EXAMPLES * 4)


# -- building blocks ----------------------------------------------------------------------

# Text a reader of traces meets: digits in many scripts and forms, separators,
# quotes, brackets, escapes, controls, bidi and zero-width characters.
HOSTILE_CHARS = (
    string.printable
    + "٠١٢٣٤٥٦٧٨٩０１２３４５６７８９\u00a0\u202f\u2009\u2212−€$£¥%'’,._-"
    + "\u202e\u200b\ufeff\x00\x1b"
)

texts = st.text(alphabet=HOSTILE_CHARS, max_size=200) | st.text(max_size=50)

huge_ints = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**400, -(10**400), int("9" * 4000)])
ints = st.integers() | huge_ints
floats = st.floats(allow_nan=True, allow_infinity=True)

NUMBER_TEXTS = [
    "Infinity",
    "-Infinity",
    "NaN",
    "1e400",
    "-1e400",
    "1e-400",
    "9" * 5000,
    "-" + "9" * 5000,
    "1" + "0" * 30,
    "1.5",
    "-1",
    "0x10",
    "1_000",
    "²",
    "٤٠",
    " 12 ",
    "",
]
number_texts = st.sampled_from(NUMBER_TEXTS)


def deep_text(depth: int, opener: str = "[") -> str:
    """JSON text nested ``depth`` deep (arrays or objects)."""
    if opener == "{":
        return '{"a":' * depth + "1" + "}" * depth
    return "[" * depth + "1" + "]" * depth


def deep_value(depth: int) -> Any:
    """Lists and dicts nested ``depth`` deep, built without recursion."""
    value: Any = "bottom"
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


depths = st.sampled_from([MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, 500, 5_000, 50_000])
deep_texts = st.builds(deep_text, depths, st.sampled_from(["[", "{"]))
deep_values = st.builds(deep_value, depths)
huge_texts = st.sampled_from(["x" * 1_000_000, "7" * 200_000, "[" * 200_000, "1," * 100_000])

json_scalars = st.none() | st.booleans() | ints | floats | texts
# Shallow JSON values (deep ones come from deep_values and deep_texts, on purpose).
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
).filter(lambda value: value_depth(value, limit=16) <= 16)


def dumps(value: object) -> str:
    # Hostile on purpose: NaN and Infinity as the non-standard tokens json writes.
    return json.dumps(value, default=str)


shallow_json_texts = json_values.map(dumps) | st.builds(
    lambda text, cut: text[:cut], json_values.map(dumps), st.integers(0, 50)
)
json_texts = shallow_json_texts | deep_texts

# Values that can be written as JSON without recursing deep (deep *text* is fine).
embeddable = json_scalars | json_texts | json_values | deep_texts | number_texts

# An attribute value as sidecar's decoder produces it (or anything else, ill-typed).
attr_values = embeddable | st.binary(max_size=64) | deep_values


def messages_text(contents: list[Any]) -> str:
    """A GenAI/OpenAI-style message list holding hostile contents."""
    shapes = []
    for index, content in enumerate(contents):
        role = ("user", "assistant", "tool", "system", "model")[index % 5]
        if index % 3 == 0:
            shapes.append({"role": role, "content": content})
        elif index % 3 == 1:
            shapes.append({"role": role, "parts": [{"type": "text", "content": content}]})
        else:
            shapes.append(
                {
                    "role": role,
                    "parts": [
                        {"type": "tool_call", "id": str(index), "name": "t", "arguments": content}
                    ],
                }
            )
    return json.dumps(shapes, default=str)


message_texts = st.lists(embeddable, max_size=4).map(messages_text)


# -- round two: names, labels, long conversations, ids --------------------------------------

# What a name that reaches a log line or a terminal may hold: rich markup, ANSI escapes,
# line breaks that would forge a log line, bidi overrides, lone surrogates.
NAME_PIECES = [
    "[/]",
    "[bold]",
    "[/bold]",
    "[link=http://x]",
    "[red on white]",
    "\\[",
    "\x1b[2J",
    "\x1b[H",
    "\x1b]0;title\x07",
    "\r",
    "\n",
    "\nINFO sidecar: all good\n",
    "\u202e",
    "\u2028",
    "\x00",
    "\x7f",
    "\x9b",
    "\ud800",
    "agent",
    "v1.0",
    " ",
]
hostile_names = st.lists(st.sampled_from(NAME_PIECES) | st.text(max_size=5), max_size=8).map(
    "".join
)

# A trace or span id as producers and people spell it: any letter case, sometimes padded.
hex_ids = st.builds(
    lambda digits, upper, pad: (
        (" " if pad else "")
        + "".join(c.upper() if u else c for c, u in zip(digits, upper, strict=False))
        + (" " if pad else "")
    ),
    st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    st.lists(st.booleans(), min_size=32, max_size=32),
    st.booleans(),
)

# Label values from untrusted sources: many distinct, some of them huge.
label_values = st.text(max_size=20) | st.builds(
    lambda n, c: c * n, st.integers(1000, 200_000), st.sampled_from("ax")
)
