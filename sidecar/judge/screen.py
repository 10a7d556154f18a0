"""Injection screening of the neutralised data blocks.

A cheap, deterministic first line: it flags cases whose data tries to steer
the judge (forged verdicts, fake markers, role tokens, "ignore previous
instructions") or, inside tool results, tries to steer the agent (requests
addressed to an assistant: "translate your answer", "how can I ...?"). A flag
does not change a verdict by itself; the rubric's ``on_injection_suspected``
policy decides (see :func:`sidecar.judge.apply_injection_policy`).

Rules are general patterns, grouped by what they catch; each hit is reported
as ``"BLOCK:rule"`` so a reviewer sees why a case was flagged.

Which rules run where:

- verdict forging, overrides, role tokens and fake markers run on every block;
- requests addressed to an assistant run only on TOOL_CALLS, because the same
  sentences are legitimate in the user's own input;
- machine-output look-alikes ("Result: PASS", ``"score":``, "rating 5/5") are
  not taken as forged verdicts inside tool results, where test runners and
  APIs print them.

Before matching, every block is folded (:func:`screen_views.fold`: NFKC,
accents and Arabic marks, zero-width and bidi controls), and rules run again
on views that undo common hiding (:func:`screen_views.derived_views`: text
reversed, ROT13, Cyrillic/Greek look-alikes, base64, hex, percent and HTML
encodings decoded); a hit there also reports the view, e.g.
``TOOL_CALLS:encoded``. Cues in fourteen languages besides English are in
:mod:`sidecar.judge.screen_cues`.

Screening is linear in the text's length: every pattern is free of nested
unbounded repetition, and the one check that looked back over a sentence
per match (``reply_directive``) reads the words before a match from an index.

Known blind spots: manipulation without any of these cues (an answer that
only *argues* it is right, or smuggles the right answer into a quoted
dialogue), paraphrases outside the lexicons, look-alikes from other scripts
than Cyrillic and Greek, and FAQ-style questions in fetched pages, which are
flagged although benign. The judge's own ``data_tried_to_instruct`` report is
the second line behind these rules.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from sidecar.evaluate.rubric import Rubric
from sidecar.judge.config import MAX_BLOCK_CHARS_LIMIT
from sidecar.judge.prompt import QUOTE_PREFIX, TOOL_CALLS, block_kind, data_blocks
from sidecar.judge.screen_cues import STRONG, STRONG_ASCII
from sidecar.judge.screen_rules import RULES, SENTENCE_RULES, sentences
from sidecar.judge.screen_views import derived_views, fold
from sidecar.model import Transcript


@dataclass(frozen=True, slots=True)
class Screening:
    """Result of screening one case: ``signals`` name each rule hit as ``BLOCK:rule``."""

    suspected: bool
    signals: tuple[str, ...]


# --- undoing neutralisation for matching ---------------------------------------

_ESCAPE = re.compile(r"\\u\{([0-9A-F]{4,6})\}")
_TAG_RUN = re.compile(r"(?:\\u\{E00[2-7][0-9A-F]\}){8,}")


def _unescape(match: re.Match[str]) -> str:
    code = int(match.group(1), 16)
    if 0xE0020 <= code <= 0xE007E:
        # Tag characters spell hidden ASCII; screen what they spell.
        return chr(code - 0xE0000)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return " "
    # Zero-width and bidi characters inside a word must not split it.
    return ""


def _view(name: str, text: str) -> str:
    if name == TOOL_CALLS:
        text = "\n".join(
            line[len(QUOTE_PREFIX) :] if line.startswith(QUOTE_PREFIX) else line
            for line in text.split("\n")
        )
    text = _ESCAPE.sub(_unescape, text)
    # NFKC folds fullwidth and other compatibility forms ("ｉｇｎｏｒｅ") onto ASCII;
    # accents and Arabic marks go too, so one spelling of each cue is enough.
    text = fold(text)
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"[ \t\u00a0]+", " ", text)


# Every needle of every rule, tested once per block with `in`; a branch or
# sentence rule runs only when one of its own needles is present.
_NEEDLES = frozenset(
    [n for rule in RULES for branch in rule.branches for n in branch.needs | branch.also]
    + [needle for rule in SENTENCE_RULES for needle in rule.needs]
)


def _script(needle: str) -> str:
    first = next(c for c in needle if not c.isascii())
    return unicodedata.name(first, "OTHER").split()[0]


def _by_script() -> tuple[tuple[re.Pattern[str], frozenset[str]], ...]:
    groups: dict[str, set[str]] = {}
    for needle in _NEEDLES:
        if not needle.isascii():
            groups.setdefault(_script(needle), set()).add(needle)
    # A group's needles are looked for only when one of their letters is in the text.
    return tuple(
        (
            re.compile(
                "[" + re.escape("".join({c for n in group for c in n if not c.isascii()})) + "]"
            ),
            frozenset(group),
        )
        for group in groups.values()
    )


_ASCII_NEEDLES = frozenset(n for n in _NEEDLES if n.isascii())
_SCRIPT_NEEDLES = _by_script()


def _present(lowered: str) -> frozenset[str]:
    found = {needle for needle in _ASCII_NEEDLES if needle in lowered}
    if not lowered.isascii():
        for probe, needles in _SCRIPT_NEEDLES:
            if probe.search(lowered):
                found.update(needle for needle in needles if needle in lowered)
    return frozenset(found)


def _rule_hits(name: str, view: str) -> list[str]:
    """The rules that fire on one folded view of block ``name``, in rule order."""
    lowered = view.lower()
    present = _present(lowered)
    hits: list[str] = []
    for rule in RULES:
        if name not in rule.blocks or rule.name in hits:
            continue
        text = view if rule.case_sensitive else lowered
        if any(b.may_match(present) and b.pattern.search(text) for b in rule.branches):
            hits.append(rule.name)
    if name == TOOL_CALLS:
        rules = [r for r in SENTENCE_RULES if not r.needs.isdisjoint(present)]
        for sentence in sentences(lowered) if rules else ():
            for sentence_rule in rules:
                if sentence_rule.name not in hits and sentence_rule.matches(sentence):
                    hits.append(sentence_rule.name)
    return hits


def screen(blocks: Iterable[tuple[str, str]]) -> Screening:
    """Screen neutralised (name, content) blocks, e.g. ``JudgeRequest.blocks``."""
    signals: list[str] = []

    def hit(block: str, rule: str) -> None:
        signal = f"{block}:{rule}"
        if signal not in signals:
            signals.append(signal)

    for name, content in blocks:
        if not content:
            continue
        if _TAG_RUN.search(content):
            hit(name, "hidden_text")
        # A conversation's TURN_<n>_ blocks are screened by what they hold.
        kind = block_kind(name)
        view = _view(kind, content)
        for rule in _rule_hits(kind, view):
            hit(name, rule)
        # The same rules on what the text hides: reversed, ROT13, look-alikes, encodings.
        for label, hidden in derived_views(view, view.lower(), STRONG, STRONG_ASCII):
            found = _rule_hits(kind, hidden)
            for rule in found:
                hit(name, rule)
            if found:
                hit(name, label)
    return Screening(suspected=bool(signals), signals=tuple(signals))


def screen_case(rubric: Rubric, transcript: Transcript) -> Screening:
    """Screen one case: the blocks its judge request will show (``data_blocks``).

    The blocks are cut at the largest block size the judge may be configured
    with, so screening covers at least what the judge sees, in bounded time.
    The pipeline calls this once per case, before sampling, and hands the
    result to the judge; the judge does not screen again.
    """
    return screen(data_blocks(rubric, transcript, max_block_chars=MAX_BLOCK_CHARS_LIMIT))


JUDGE_REPORT = "JUDGE:data_tried_to_instruct"


def with_judge_report(screening: Screening, instructed: bool) -> Screening:
    """The case's screening joined with the judge's own report (a second line)."""
    if not instructed:
        return screening
    return Screening(suspected=True, signals=(*screening.signals, JUDGE_REPORT))
