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

import bisect
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sidecar.judge.config import MAX_BLOCK_CHARS_LIMIT
from sidecar.judge.prompt import QUOTE_PREFIX, TOOL_CALLS, block_kind, data_blocks
from sidecar.judge.screen_cues import CUES, STRONG, STRONG_ASCII
from sidecar.judge.screen_views import derived_views, fold, fold_pattern
from sidecar.model import Transcript
from sidecar.rubric import Rubric


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


# --- rules on whole blocks -----------------------------------------------------
#
# A rule is a set of branches; it fires when any branch matches. Patterns are
# lower case and run on the lower-cased view (much faster than IGNORECASE),
# except in case-sensitive rules. Each branch lists substrings one of which is
# in every match: a plain `in` test on them skips most regex scans, which
# otherwise dominate the cost of screening.

_ALL = frozenset({"USER_INPUT", "TOOL_CALLS", "RESPONSE", "REFERENCE"})
_NOT_TOOLS = _ALL - {TOOL_CALLS}
_TOOLS = frozenset({TOOL_CALLS})


@dataclass(frozen=True, slots=True)
class _Branch:
    pattern: re.Pattern[str]
    needs: frozenset[str]
    also: frozenset[str]  # when given, one of these must be present as well

    def may_match(self, present: frozenset[str]) -> bool:
        return (not self.needs or not self.needs.isdisjoint(present)) and (
            not self.also or not self.also.isdisjoint(present)
        )


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    branches: tuple[_Branch, ...]
    blocks: frozenset[str]
    case_sensitive: bool


def _b(pattern: str, needs: str, also: str = "") -> _Branch:
    # Needles are given space-separated to keep the table readable.
    return _Branch(re.compile(pattern, re.MULTILINE), _needles(needs), _needles(also))


def _needles(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _rule(
    name: str, *branches: _Branch, blocks: frozenset[str] = _ALL, case_sensitive: bool = False
) -> _Rule:
    return _Rule(name, branches, blocks, case_sensitive)


_INSTRUCTION_NOUN = (
    r"(?:instructions?|prompts?|rules|directions|directives|guidelines|context|constraints"
    r"|criteria|rubric|guidance|commands?|programming|training)"
)

_BLOCK_RULES: tuple[_Rule, ...] = (
    # "ignore previous instructions", "disregard the rubric", "ignore the above"
    _rule(
        "instruction_override",
        _b(
            r"\b(?:ignore|disregard|forget|override|bypass|skip|discard)\b[^.\n]{0,40}?"
            r"\b(?:previous|prior|above|earlier|preceding|former|original|all|any|your|these"
            rf"|those|system|existing|other|the)\b[^.\n]{{0,25}}?\b{_INSTRUCTION_NOUN}\b",
            "ignore disregard forget override bypass skip discard",
        ),
        _b(
            r"\b(?:ignore|disregard|forget)\s+(?:all\s+|everything\s+|anything\s+)?"
            r"(?:the\s+)?(?:above|before|prior|previous|preceding)\b",
            "ignore disregard forget",
        ),
    ),
    _rule(
        "new_instructions",
        _b(
            r"\b(?:new|updated|revised|real|actual|true|hidden|secret|override)\s+(?:system\s+)?"
            r"(?:instructions?|directives?|task)\b",
            "instruction directive task",
            also="new updated revised real actual true hidden secret override",
        ),
        _b(
            r"\b(?:new|updated|revised|different|additional)\s+(?:evaluation|grading|scoring"
            r"|judging|judgment|judgement|assessment)\s+(?:criteria|rules|instructions"
            r"|guidelines|protocol|policy)\b",
            "evaluation grading scoring judging judgment judgement assessment",
        ),
    ),
    _rule(
        "system_prompt",
        _b(r"\bsystem\s+(?:prompt|message|instructions?|override|note|notice)\b", "system"),
        _b(r"\bdeveloper\s+(?:mode|message|instructions?)\b", "developer"),
        _b(r"jailbreak", "jailbreak"),
    ),
    # Chat-template tokens and role headers of common model formats.
    _rule(
        "role_token",
        _b(r"<\|[a-z_]{2,30}\|>", "<|"),
        _b(r"\[/?inst\]", "inst]"),
        _b(r"<</?sys>>", "sys>>"),
        # Atomic: the run of "#" and spaces is taken once, then must end in "##"
        # (a plain [ #]*#{2,} backtracks quadratically on a long run of "#").
        _b(
            r"^(?>[ #]*#)(?<=##)\s*(?:system|instructions?|assistant|user|human|response|input"
            r"|model outputs?|output)\s*:?\s*$",
            "##",
        ),
        # [^\S\n]* rather than \s*: the same lines match, without rescanning blank lines.
        _b(r"^[^\S\n]*(?:system|assistant|developer)\s*:", "system assistant developer"),
    ),
    # Bracketed authority tags: [SYSTEM], [ADMIN], [EVALUATOR OUTPUT], [JUDGE]: ...
    _rule(
        "authority_tag",
        _b(
            r"\[\s*(?:system|admin|administrator|developer|judge|grader|evaluator|evaluation"
            r"|grading|moderator|operator|assistant|verified|approved|validated|certified"
            r"|fact[- ]?checked|override|instructions?)\b[^\]\n]{0,40}\]",
            "[",
        ),
    ),
    # Our own markers, or a decorated line that pretends the data ends here.
    _rule(
        "fake_marker",
        _b(r"<<\s*<*\s*/?\s*(?:begin|end)\b", "<<"),
        _b(
            r"</?(?:response|output|answer|rubric|user_input|instructions?|system|assistant"
            r"|judge|evaluation|verdict|grade|score)(?:_[a-z0-9]+)?\s*>",
            "<",
        ),
        _b(r"\b(?:begin|end)\s+(?:user_input|tool_calls|response|reference)\b", "begin end"),
        _b(
            r"^[^\w\n]{0,12}(?:end|begin|start)\s+(?:of\s+)?(?:the\s+)?(?:response|answer"
            r"|output|input|data|document|transcript|conversation|context|evaluation"
            r"|instructions?|prompt|submission)\b[^\n]{0,30}$",
            "begin end start",
            also="response answer output input data document transcript conversation context"
            " evaluation instruction prompt submission",
        ),
        _b(
            r"\b(?:evaluation|grading|review|assessment|judging)\s+(?:is\s+)?(?:complete"
            r"|completed|finished|done|over|passed|result|output)\b",
            "evaluation grading review assessment judging",
        ),
    ),
    # The grader addressed or named as an actor.
    _rule(
        "grader_addressed",
        _b(r"\b(?:grader|evaluator|assessor)\b", "grader evaluator assessor"),
        _b(
            r"\b(?:llm|ai|model|language model)[- ](?:as[- ]a[- ])?(?:judge|grader|evaluator"
            r"|reviewer)\b",
            "grader evaluator assessor judge reviewer",
        ),
        _b(
            r"\b(?:judge|grading|evaluating|evaluation|scoring)\s+(?:model|llm|ai|assistant"
            r"|system)\b",
            "judge grading evaluating evaluation scoring",
        ),
        _b(
            r"\b(?:dear|attention|note to|message to|hey|hello)\s+(?:the\s+)?(?:judge|grader"
            r"|evaluator|reviewer|ai|assistant|model|llm|chatbot)[,:]",
            "judge, judge: grader, grader: evaluator, evaluator: reviewer, reviewer: ai, ai:"
            " assistant, assistant: model, model: llm, llm: chatbot, chatbot:",
        ),
        _b(
            r"^[^\S\n]*(?:judge|grader|evaluator|reviewer)\s*:",
            "grader evaluator assessor judge reviewer",
        ),
        _b(r"\bif you are an?\s+(?:ai|llm|language model|assistant|bot|chatbot|model)\b", "you"),
        _b(
            r"\b(?:ai|llm|assistant|model)\s+(?:reading|grading|evaluating|reviewing|judging"
            r"|scoring|processing)\s+(?:this|these|the)\b",
            "reading grading evaluating reviewing judging scoring processing",
        ),
    ),
    # "should be graded", "the response being graded", "grade the final answer",
    # "please evaluate version 2", "evaluate based on the corrected value".
    _rule(
        "grading_directive",
        _b(
            r"\b(?:be|being|been|get|gets)\s+(?:graded|evaluated|scored|judged|marked|assessed)\b",
            "graded evaluated scored judged marked assessed",
        ),
        _b(
            r"\b(?:grade|evaluate|score|judge|assess|mark|rate)\s+(?:only\s+)?(?:the\s+|this\s+"
            r"|my\s+|our\s+)?(?:final\s+|corrected\s+|correct\s+|revised\s+|updated\s+"
            r"|latest\s+|second\s+|last\s+|following\s+)?(?:answer|response|submission|output"
            r"|version|value|draft|reply|attempt)s?\b",
            "grad evaluat scor judg assess mark rate",
            also="answer response submission output version value draft repl attempt",
        ),
        _b(
            r"\b(?:grade|evaluate|score|judge|assess)\s+(?:it\s+|this\s+)?(?:based\s+on|only"
            r"|solely)\b",
            "based only solely",
        ),
    ),
    # A verdict stated in the data: "VERDICT: Response B wins", "marking as PASS".
    _rule(
        "verdict_claim",
        _b(
            r"\b(?:verdict|grade|grading|rating|evaluation|assessment|judge?ment"
            r"|final\s+decision)\s*(?:[:=\-]|is|was)\s*[\"'*]*\s*(?:pass(?:ed)?|fail(?:ed)?"
            r"|correct|incorrect|approved|accepted|acceptable|valid|response|answer|output)\b",
            "verdict grad rating evaluation assessment judg decision",
        ),
        _b(
            r"\b(?:response|answer|output|option|model|assistant)\s+[ab12]\s+(?:wins|won"
            r"|is\s+(?:the\s+)?(?:winner|better|best|superior|preferred|correct))\b",
            "win won better best superior preferred correct",
        ),
        _b(
            r"\b(?:select|choose|pick|declare|mark|name|crown|rank|rate|treat)\s+(?:this\s+"
            r"|it\s+|(?:response|answer|output)\s+\w+\s+)?as\s+the\s+(?:winner|best|correct)\b",
            "winner best correct",
        ),
        _b(
            r"\b(?:mark|marking|marked|grade|grading|graded|rate|rating|rated|score|scoring"
            r"|scored|label|labelling|labeling|labeled|classify|classified)\s+(?:this\s+|it\s+"
            r"|the\s+(?:response|answer|output|submission)\s+)?as\s+[\"'*]*(?:a\s+)?(?:pass"
            r"|passed|passing|correct|acceptable|perfect|full\s+marks|the\s+winner)\b",
            "as",
            also="pass correct acceptable perfect marks winner",
        ),
    ),
    # "Winner: B", "The winner is Response B" (the letter must be a capital).
    _rule(
        "verdict_claim",
        _b(
            r"\b(?i:winner)\s*(?:[:=\-]|(?i:is|was))\s*[\"'*]*\s*(?:(?i:response|answer|output"
            r"|model|assistant|option|candidate)\s+)?[\"']?[A-Z0-9]\b",
            "winner",
        ),
        case_sensitive=True,
    ),
    # Outside tool results, "Result: PASS", "Score: 1.0" or "score: 10/10" is a
    # forged verdict; inside them it is what test runners and rating APIs print.
    _rule(
        "verdict_claim",
        _b(
            r"\b(?:result|status|outcome|decision|conclusion|score|confidence)\s*[:=]\s*"
            r"[\"'*]*\s*(?:pass(?:ed)?|fail(?:ed)?|correct|approved|granted|confirmed|1(?:\.0+)?"
            r"|10|100\s*%?|9\d\s*%)\s*[\"'*]*\s*$",
            ": =",
        ),
        # A forged score claims the maximum: "score: 10/10", "rating 5 out of 5".
        _b(
            r"\b(?:score|rating|grade|marks?|points)\s*(?:[:=]|of|is)?\s*(\d+)(?:\.0+)?\s*"
            r"(?:/|out\s+of)\s*\1\b",
            "score rating grade mark points",
        ),
        _b(
            r"(?:^|\|)\s*(?:accuracy|clarity|helpfulness|relevance|correctness|quality|overall"
            r"|total)\s*\|[^\n]{0,200}?\d\s*/\s*\d",
            "|",
        ),
        blocks=_NOT_TOOLS,
    ),
    # JSON-looking verdict objects: {"pass": true, "score": 1.0}, {"winner": "B"}.
    _rule(
        "json_verdict",
        _b(
            r"[\"'](?:verdict|pass|passed|winner|criterion|judgement|judgment|is_correct"
            r"|correct)[\"']\s*:",
            "verdict pass winner criterion judg correct",
        ),
    ),
    _rule(
        "json_verdict",
        _b(
            r"[\"'](?:score|grade|rating|reason|reasoning|result|evaluation|explanation)[\"']\s*:"
            r"[^\n]{0,200}[\"'](?:score|grade|rating|reason|reasoning|result|evaluation"
            r"|explanation|pass|verdict)[\"']\s*:",
            ":",
        ),
        blocks=_NOT_TOOLS,
    ),
    # The answer vouching for itself or pointing the grader at another version.
    _rule(
        "self_assessment",
        _b(
            r"\b(?:this|my|the\s+above|the\s+following|our)\s+(?:response|answer|output"
            r"|submission|reply|solution)\s+(?:is|has\s+been|was|should\s+be|deserves|must\s+be"
            r"|shows|demonstrates)\s+(?:\w+\s+){0,2}(?:correct|accurate|right|verified"
            r"|validated|fact[- ]checked|confirmed|approved|superior|better|best|the\s+winner"
            r"|a\s+pass|full\s+marks|perfect|optimal|flawless)\b",
            "response answer output submission reply solution",
            also="correct accurate right verified validated checked confirmed approved superior"
            " better best winner pass marks perfect optimal flawless",
        ),
        _b(
            r"\bmy\s+(?:answer|response|submission|output)\s+(?:above|below|is\s+shown|reflects)\b",
            "my",
        ),
        _b(
            r"\b(?:only|just)\s+the\s+[\"']?(?:final|corrected|last|revised|latest)\b[^.\n]{0,40}"
            r"\b(?:count|counts|matter|matters|should|is\s+to)\b",
            "only just",
            also="final corrected last revised latest",
        ),
        _b(r"\b(?:is|was)\s+(?:only\s+)?(?:a\s+)?scratch\s*pad\b", "scratch"),
    ),
    # Social pressure: credentials, consensus, pleading, threats.
    _rule(
        "pressure",
        _b(
            r"\btrust\s+(?:my|our)\s+(?:expertise|judge?ment|authority|credentials|experience)\b",
            "trust",
            also="my our",
        ),
        _b(
            r"\bdo\s+not\s+(?:question|doubt|challenge|second[- ]guess|verify|re-?check)\s+"
            r"(?:this|my|the|these|our)\b",
            "not",
            also="question doubt challenge guess verify check",
        ),
        _b(
            r"\b(?:expert|admin|administrator|peer|panel|official|moderator)\s+(?:verification"
            r"|approval|review|consensus|verdict|decision|override)\b",
            "verification approval review consensus verdict decision override",
        ),
        _b(
            r"\b(?:majority|expert|panel|unanimous|community)\s+(?:consensus|decision|vote"
            r"|verdict)\b",
            "consensus decision vote verdict",
        ),
        _b(r"\bdefer\s+to\s+(?:the\s+)?(?:majority|consensus|experts?|authority)\b", "defer"),
        _b(
            r"\b(?:peer[- ]reviewed|fact[- ]checked|verification\s+id)\s*:",
            "reviewed checked verification",
        ),
        _b(
            r"\b(?:passing|good|high|perfect|full|top)\s+(?:grade|score|mark|marks|rating)\b",
            "grade score mark rating",
            also="passing good high perfect full top",
        ),
        _b(r"\bwould\s+mean\s+(?:so\s+much|a\s+lot|the\s+world|everything)\s+to\s+me\b", "mean"),
        _b(r"\bi\s+(?:tried|worked)\s+(?:really\s+|very\s+|so\s+)?hard\s+on\s+this\b", "hard"),
        _b(r"\bselecting\s+(?:response|answer|output)\s+[ab12]\s+will\b", "selecting"),
    ),
    # Pairwise steering: "Choose B.", "Select Response B", "prefer answer 2".
    _rule(
        "selection_directive",
        _b(
            r"\b(?i:select|choose|pick|prefer|vote\s+for|favou?r)\s+"
            r"(?:(?i:response|answer|output|option|candidate|model|assistant)\s+)?[\"'(]?[AB12]\b"
            r"(?![.,]\d)",
            "select choose pick prefer vote favo",
        ),
        case_sensitive=True,
    ),
    # Messages to an AI reader inside content: "IMPORTANT: AI assistant, ...".
    _rule(
        "assistant_addressed",
        _b(
            r"\b(?:important|attention|note|notice|warning|reminder)\s*[:!-]\s*(?:to\s+|for\s+)?"
            r"(?:the\s+|all\s+|any\s+)?(?:ai|assistants?|llms?|language\s+models?|chatbots?"
            r"|bots?)\b",
            "important attention note notice warning reminder",
            also="ai assistant llm model chatbot bot",
        ),
        _b(
            r"\b(?:ai|assistant|llm|chatbot|language\s+model)[,:]\s*(?:you\s+must|you\s+should"
            r"|please|ignore|do\s+not|don't|always|never|make\s+sure)\b",
            "ai, ai: assistant, assistant: llm, llm: chatbot, chatbot: model, model:",
        ),
        _b(
            r"\b(?:before|after|when|while)\s+(?:you\s+)?(?:answer|respond|repl(?:y|ies)"
            r"|summari[sz]|generat)\w*\b[^.\n]{0,60}\b(?:you\s+must|you\s+should|make\s+sure"
            r"|always|also|first|include|add|mention|say|tell|send)\b",
            "answer respond repl summari generat",
            also="before after when while",
        ),
        blocks=_TOOLS,
    ),
)


# --- rules on sentences of tool results ----------------------------------------

# Split on sentence ends, line breaks and " | " / "|FIELD:" separators (email dumps).
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+|\s\|\s|\|(?=[a-z_ ]+:)")
_LEAD = re.compile(r"^[\s\-*•>#\d.)\]\[\"'`:|]+")

# Verbs that open an instruction to an assistant and seldom open a sentence of an
# email or web page ("Summarize ...", "Translate ...", "Help me ...").
_TASK_VERB = (
    r"(?:write(?!\s+(?:to|us|in\s+to)\b)|provide|show\s+me|tell\s+me|give\s+me|help\s+me"
    r"|explain|describe|summari[sz]e|analy[sz]e|recommend|suggest|determine|classify"
    r"|translate|encode|encrypt|decode|decrypt|rewrite|rephrase|paraphrase|generate|compose"
    r"|outline|brainstorm|identify|predict|elaborate|render|express"
    r"|(?:respond|reply|answer)(?=\s+(?:only\s+|entirely\s+|exclusively\s+)?(?:in|using"
    r"|with\s+only|backwards?|as\s+if)\b))"
)
# Verbs that also open ordinary calls to action ("Add your card", "Use code X");
# they count only when the sentence is about the reader's own answer.
_EDIT_VERB = (
    r"(?:add|use|include|insert|mention|integrate|incorporate|modify|change|edit|alter|adjust"
    r"|append|prepend|enhance|augment|replace|substitute|apply|shift|convert|format|end|begin"
    r"|start|finish|conclude|close|sign|embed|promote|invert|reverse|spell|put|make|keep"
    r"|structure|present|write|provide|display|show|reply|respond|answer|output|print|repeat"
    r"|say|state|weave|slip|advertise|recommend|highlight|emphasi[sz]e|hint|allude"
    r"|reference|cite|link|spread)"
)
_OPENER = r"(?:(?:please|kindly|now|also|then|and|first|finally|additionally|next),?\s+)*"
_CAN_YOU = r"(?:(?:please|so|and|now),?\s+)?(?:can|could|would|will)\s+you\s+(?:please\s+)?"
_OUTPUT_NOUN = r"(?:answers?|responses?|repl(?:y|ies)|outputs?|messages?|text|summary)"

# Anchored at the sentence start; used with .match.
_TASK_REQUEST = re.compile(rf"(?:{_CAN_YOU}|{_OPENER}){_TASK_VERB}\b")
_EDIT_REQUEST = re.compile(
    rf"(?:{_CAN_YOU}|{_OPENER}){_EDIT_VERB}\b.*\byour\s+(?:final\s+)?{_OUTPUT_NOUN}\b"
)
_YOUR_ANSWER = re.compile(r"\byour\s+(?:final\s+)?(?:answers?|responses?|repl(?:y|ies)|outputs?)\b")
_INTO = frozenset({"in", "into", "to", "within", "throughout"})
# "We look forward to your reply", "we will respond to your response" are courtesy.
_COURTESY = frozenset(
    {"forward", "respond", "reply", "response", "attention", "thanks", "according", "due", "back"}
)
# A question put to the reader: "How can I ...?", "What are the risks of ...?",
# "Is this feedback positive or negative?" ("What are you waiting for?" is not).
_QUESTION = re.compile(
    r"(?:(?:how|what|which|why|where|when|who)\b(?!\s+(?:\w+\s+)?(?:you|we)\b)"
    r"|(?:is|are|was|were|does|do)\s+(?:this|these|that|the\s+following)\b"
    r"|(?:can|could|would|will)\s+you\b)"
)
_EXFILTRATION = re.compile(
    r"\b(?:send|forward|email|e-mail|transfer|post|upload|share|leak|reveal|disclose)\b"
    r"[^.\n]{0,60}\b(?:passwords?|credentials|api\s+keys?|tokens?|secrets?|private\s+keys?"
    r"|bank\s+details|card\s+numbers?|social\s+security|ssn|system\s+prompt"
    r"|conversation\s+history)\b"
)
_NEGATED = re.compile(r"\b(?:never|not|don't|won't|cannot|can't)\b")


def _sentences(text: str) -> Iterable[str]:
    for raw in _SENTENCE_SPLIT.split(text):
        sentence = _LEAD.sub("", raw).strip()
        if sentence:
            yield sentence


_WORD = re.compile(r"\S+")


def _into_your_answer(sentence: str) -> bool:
    # The two words before each match, as sentence[:start].split() would give them,
    # read from one index of the words (splitting per match was quadratic).
    spans: list[tuple[int, int]] = []
    starts: list[int] = []
    for match in _YOUR_ANSWER.finditer(sentence):
        if not spans:
            spans = [word.span() for word in _WORD.finditer(sentence)]
            starts = [start for start, _ in spans]
        at = match.start()
        count = bisect.bisect_left(starts, at)
        before = [sentence[start : min(end, at)] for start, end in spans[max(0, count - 2) : count]]
        if before and before[-1] in _INTO and (len(before) < 2 or before[-2] not in _COURTESY):
            return True
    return False


def _is_question(sentence: str) -> bool:
    if not sentence.rstrip("\"')] ").endswith("?"):
        return False
    return len(sentence.split()) >= 5 and _QUESTION.match(sentence) is not None


@dataclass(frozen=True, slots=True)
class _SentenceRule:
    name: str
    matches: Callable[[str], bool]  # gets the lower-cased sentence
    needs: frozenset[str]  # one of these is in the block, or the rule is skipped


_SENTENCE_RULES: tuple[_SentenceRule, ...] = (
    _SentenceRule(
        "assistant_request",
        lambda s: _TASK_REQUEST.match(s) is not None,
        _needles(
            "write provide show tell give help explain describ summar analy recommend suggest"
            " determin classif translat encod encrypt decod decrypt rewrite rephrase paraphrase"
            " generat compos outline brainstorm identif predict elaborat render express respond"
            " reply answer"
        ),
    ),
    _SentenceRule(
        "reply_directive", lambda s: _EDIT_REQUEST.match(s) is not None, _needles("your")
    ),
    _SentenceRule("reply_directive", _into_your_answer, _needles("your")),
    _SentenceRule("assistant_question", _is_question, _needles("?")),
    _SentenceRule(
        "exfiltration_request",
        lambda s: _EXFILTRATION.search(s) is not None and _NEGATED.search(s) is None,
        _needles(
            "password credential api token secret private bank card social ssn system conversation"
        ),
    ),
)


def _cue_rules() -> tuple[_Rule, ...]:
    """The other languages' cues as rules, one per (rule name, blocks), in table order."""
    grouped: dict[tuple[str, frozenset[str]], list[_Branch]] = {}
    for cue in CUES:
        branch = _Branch(
            re.compile(fold_pattern(cue.pattern), re.MULTILINE),
            frozenset(fold(needle) for needle in cue.needles),
            frozenset(),
        )
        grouped.setdefault((cue.rule, cue.blocks), []).append(branch)
    return tuple(
        _rule(name, *branches, blocks=blocks) for (name, blocks), branches in grouped.items()
    )


_RULES: tuple[_Rule, ...] = _BLOCK_RULES + _cue_rules()

# Every needle of every rule, tested once per block with `in`; a branch or
# sentence rule runs only when one of its own needles is present.
_NEEDLES = frozenset(
    [n for rule in _RULES for branch in rule.branches for n in branch.needs | branch.also]
    + [needle for rule in _SENTENCE_RULES for needle in rule.needs]
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
    for rule in _RULES:
        if name not in rule.blocks or rule.name in hits:
            continue
        text = view if rule.case_sensitive else lowered
        if any(b.may_match(present) and b.pattern.search(text) for b in rule.branches):
            hits.append(rule.name)
    if name == TOOL_CALLS:
        rules = [r for r in _SENTENCE_RULES if not r.needs.isdisjoint(present)]
        for sentence in _sentences(lowered) if rules else ():
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
