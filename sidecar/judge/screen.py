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
- machine-output look-alikes ("status: passed", ``"score":``) are not taken as
  forged verdicts inside tool results, where APIs and CI logs write them.

Known blind spots: paraphrased manipulation without any of these cues (an
answer that only *argues* it is right), homoglyph spellings beyond NFKC, and
FAQ-style questions in fetched pages, which are flagged although benign.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sidecar.judge.prompt import QUOTE_PREFIX, TOOL_CALLS


@dataclass(frozen=True, slots=True)
class Screening:
    """Result of screening one case: ``signals`` name each rule hit as ``BLOCK:rule``."""

    suspected: bool
    signals: tuple[str, ...]


_I = re.IGNORECASE

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
    # NFKC folds fullwidth and other compatibility forms ("ｉｇｎｏｒｅ") onto ASCII.
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"[ \t\u00a0]+", " ", text)


# --- rules on whole blocks -----------------------------------------------------
#
# Patterns are written in lower case and run on the lower-cased view (much
# faster than re.IGNORECASE); rules marked case_sensitive run on the view as is.

_INSTRUCTION_NOUN = (
    r"(?:instructions?|prompts?|rules|directions|directives|guidelines|context|constraints"
    r"|criteria|rubric|guidance|commands?|programming|training)"
)

_ALL = frozenset({"USER_INPUT", "TOOL_CALLS", "RESPONSE", "REFERENCE"})
_NOT_TOOLS = _ALL - {TOOL_CALLS}
_TOOLS = frozenset({TOOL_CALLS})


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    blocks: frozenset[str]
    case_sensitive: bool
    # Every match contains one of these lower-case substrings. Testing them with
    # `in` first skips most regex scans, which dominate the screening cost.
    needs: tuple[str, ...]


def _rule(
    name: str,
    *patterns: str,
    blocks: frozenset[str] = _ALL,
    case_sensitive: bool = False,
    needs: tuple[str, ...] = (),
) -> _Rule:
    joined = "|".join(f"(?:{p})" for p in patterns)
    return _Rule(name, re.compile(joined, re.MULTILINE), blocks, case_sensitive, needs)


_BLOCK_RULES: tuple[_Rule, ...] = (
    # "ignore previous instructions", "disregard the rubric", "ignore the above"
    _rule(
        "instruction_override",
        r"\b(?:ignore|disregard|forget|override|bypass|skip|discard|abandon)\b[^.\n]{0,40}?"
        r"\b(?:previous|prior|above|earlier|preceding|former|original|all|any|your|these|those"
        rf"|system|existing|other|the)\b[^.\n]{{0,25}}?\b{_INSTRUCTION_NOUN}\b",
        r"\b(?:ignore|disregard|forget)\s+(?:all\s+|everything\s+|anything\s+)?"
        r"(?:the\s+)?(?:above|before|prior|previous|preceding)\b",
        needs=("ignore", "disregard", "forget", "override", "bypass", "skip", "discard", "abandon"),
    ),
    _rule(
        "new_instructions",
        r"\b(?:new|updated|revised|real|actual|true|hidden|secret|override)\s+(?:system\s+)?"
        r"(?:instructions?|directives?|task)\b",
        r"\b(?:new|updated|revised|different|additional)\s+(?:evaluation|grading|scoring|judging"
        r"|judgment|judgement|assessment)\s+(?:criteria|rules|instructions|guidelines|protocol"
        r"|policy)\b",
        needs=(
            "instruction",
            "directive",
            "task",
            "criteria",
            "rules",
            "guidelines",
            "protocol",
            "policy",
        ),
    ),
    _rule(
        "system_prompt",
        r"\bsystem\s+(?:prompt|message|instructions?|override|note|notice)\b",
        r"\bdeveloper\s+(?:mode|message|instructions?)\b",
        r"\bjailbreak",
        needs=("system", "developer", "jailbreak"),
    ),
    # Chat-template tokens and role headers of common model formats.
    _rule(
        "role_token",
        r"<\|[a-z_]{2,30}\|>",
        r"\[/?inst\]",
        r"<</?sys>>",
        r"^[ #]*#{2,}\s*(?:system|instructions?|assistant|user|human|response|input"
        r"|model outputs?|output)\s*:?\s*$",
        r"^\s*(?:system|assistant|developer)\s*:",
        needs=("<|", "inst]", "sys>>", "##", "system", "assistant", "developer"),
    ),
    # Bracketed authority tags: [SYSTEM], [ADMIN], [EVALUATOR OUTPUT], [JUDGE]: ...
    _rule(
        "authority_tag",
        r"\[\s*(?:system|admin|administrator|developer|judge|grader|evaluator|evaluation"
        r"|grading|moderator|operator|assistant|verified|approved|validated|certified"
        r"|fact[- ]?checked|override|instructions?)\b[^\]\n]{0,40}\]",
        needs=("[",),
    ),
    # Our own markers, or a decorated line that pretends the data ends here.
    _rule(
        "fake_marker",
        r"<<\s*<*\s*/?\s*(?:begin|end)\b",
        r"</?(?:response|output|answer|rubric|user_input|instructions?|system|assistant"
        r"|judge|evaluation|verdict|grade|score)(?:_[a-z0-9]+)?\s*>",
        needs=("<",),
    ),
    _rule(
        "fake_marker",
        r"\b(?:begin|end)\s+(?:user_input|tool_calls|response|reference)\b",
        r"^[^\w\n]{0,12}(?:end|begin|start)\s+(?:of\s+)?(?:the\s+)?(?:response|answer|output"
        r"|input|data|document|transcript|conversation|context|evaluation|instructions?|prompt"
        r"|submission)\b[^\n]{0,30}$",
        needs=("begin", "end", "start"),
    ),
    _rule(
        "fake_marker",
        r"\b(?:evaluation|grading|review|assessment|judging)\s+(?:is\s+)?(?:complete|completed"
        r"|finished|done|over|passed|result|output)\b",
        needs=("evaluation", "grading", "review", "assessment", "judging"),
    ),
    # The grader addressed or named as an actor.
    _rule(
        "grader_addressed",
        r"\b(?:grader|evaluator|assessor)\b",
        r"\b(?:llm|ai|model|language model)[- ](?:as[- ]a[- ])?(?:judge|grader|evaluator|reviewer)\b",
        r"\b(?:judge|grading|evaluating|evaluation|scoring)\s+(?:model|llm|ai|assistant|system)\b",
        r"\b(?:dear|attention|note to|message to|hey|hello)\s+(?:the\s+)?(?:judge|grader"
        r"|evaluator|reviewer|ai|assistant|model|llm|chatbot)\b[,:]",
        r"^\s*(?:judge|grader|evaluator|reviewer)\s*:",
        r"\bif you are an?\s+(?:ai|llm|language model|assistant|bot|chatbot|model)\b",
        r"\b(?:ai|llm|assistant|model)\s+(?:reading|grading|evaluating|reviewing|judging|scoring"
        r"|processing)\s+(?:this|these|the)\b",
        needs=(
            "grader",
            "evaluator",
            "assessor",
            "judge",
            "reviewer",
            "grading",
            "evaluating",
            "evaluation",
            "scoring",
            "dear",
            "attention",
            "note to",
            "message to",
            "hey",
            "hello",
            "if you are",
            "reading",
            "reviewing",
            "judging",
            "processing",
        ),
    ),
    # "should be graded", "the response being graded", "grade the final answer",
    # "please evaluate version 2", "evaluate based on the corrected value".
    _rule(
        "grading_directive",
        r"\b(?:be|being|been|get|gets)\s+(?:graded|evaluated|scored|judged|marked|assessed)\b",
        r"\b(?:grade|evaluate|score|judge|assess|mark|rate)\s+(?:only\s+)?(?:the\s+|this\s+"
        r"|my\s+|our\s+)?(?:final\s+|corrected\s+|correct\s+|revised\s+|updated\s+|latest\s+"
        r"|second\s+|last\s+|following\s+)?(?:answer|response|submission|output|version|value"
        r"|draft|reply|attempt)s?\b",
        r"\b(?:grade|evaluate|score|judge|assess)\s+(?:it\s+|this\s+)?(?:based\s+on|only|solely)\b",
        needs=("grad", "evaluat", "scor", "judg", "assess", "mark", "rate"),
    ),
    # A verdict stated in the data: "Result: PASS", "VERDICT: Response B wins",
    # "marking as PASS".
    _rule(
        "verdict_claim",
        r"\b(?:verdict|grade|grading|rating|evaluation|assessment|judge?ment|final\s+decision)"
        r"\s*(?:[:=\-]|is|was)\s*[\"'*]*\s*(?:pass(?:ed)?|fail(?:ed)?|correct|incorrect|approved"
        r"|accepted|acceptable|valid|response|answer|output)\b",
        r"\b(?:response|answer|output|option|model|assistant)\s+[ab12]\s+(?:wins|won|is\s+(?:the\s+)?"
        r"(?:winner|better|best|superior|preferred|correct))\b",
        r"\b(?:select|choose|pick|declare|mark|name|crown|rank|rate|treat)\s+(?:this\s+|it\s+"
        r"|(?:response|answer|output)\s+\w+\s+)?as\s+the\s+(?:winner|best|correct)\b",
        r"\b(?:mark|marking|marked|grade|grading|graded|rate|rating|rated|score|scoring|scored"
        r"|label|labelling|labeling|labeled|classify|classified)\s+(?:this\s+|it\s+|the\s+"
        r"(?:response|answer|output|submission)\s+)?as\s+[\"'*]*(?:a\s+)?(?:pass|passed|passing"
        r"|correct|acceptable|perfect|full\s+marks|the\s+winner)\b",
        needs=(
            "verdict",
            "grad",
            "rating",
            "evaluation",
            "assessment",
            "judg",
            "decision",
            "wins",
            "won",
            "winner",
            "better",
            "best",
            "superior",
            "preferred",
            "correct",
            "pass",
            "acceptable",
            "perfect",
            "full marks",
        ),
    ),
    # "Winner: B", "The winner is Response B" (the letter must be a capital).
    _rule(
        "verdict_claim",
        r"\b(?i:winner)\s*(?:[:=\-]|(?i:is|was))\s*[\"'*]*\s*"
        r"(?:(?i:response|answer|output|model|assistant|option|candidate)\s+)?[\"']?[A-Z0-9]\b",
        case_sensitive=True,
        needs=("winner",),
    ),
    # Outside tool results, "Result: PASS", "Score: 1.0" or "score: 9/10" is a
    # forged verdict; inside them it is what test runners and rating APIs print.
    _rule(
        "verdict_claim",
        r"\b(?:result|status|outcome|decision|conclusion|score|confidence)\s*[:=]\s*[\"'*]*\s*"
        r"(?:pass(?:ed)?|fail(?:ed)?|correct|approved|granted|confirmed|1(?:\.0+)?|10|100\s*%?"
        r"|9\d\s*%)\s*[\"'*]*\s*$",
        # A forged score claims the maximum: "score: 10/10", "rating 5 out of 5".
        r"\b(?:score|rating|grade|marks?|points)\s*(?:[:=]|of|is)?\s*(\d+)(?:\.0+)?\s*"
        r"(?:/|out\s+of)\s*\1\b",
        r"(?:^|\|)\s*(?:accuracy|clarity|helpfulness|relevance|correctness|quality|overall|total)"
        r"\s*\|[^\n]*\d\s*/\s*\d",
        blocks=_NOT_TOOLS,
        needs=(
            "result",
            "status",
            "outcome",
            "decision",
            "conclusion",
            "score",
            "confidence",
            "rating",
            "grade",
            "mark",
            "points",
            "|",
        ),
    ),
    # JSON-looking verdict objects: {"pass": true, "score": 1.0}, {"winner": "B"}.
    _rule(
        "json_verdict",
        r"[\"'](?:verdict|pass|passed|winner|criterion|judgement|judgment|is_correct|correct)"
        r"[\"']\s*:",
    ),
    _rule(
        "json_verdict",
        r"[\"'](?:score|grade|rating|reason|reasoning|result|evaluation|explanation)[\"']\s*:"
        r"[^\n]{0,200}[\"'](?:score|grade|rating|reason|reasoning|result|evaluation|explanation"
        r"|pass|verdict)[\"']\s*:",
        blocks=_NOT_TOOLS,
    ),
    # The answer vouching for itself or pointing the grader at another version.
    _rule(
        "self_assessment",
        r"\b(?:this|my|the\s+above|the\s+following|our)\s+(?:response|answer|output|submission"
        r"|reply|solution)\s+(?:is|has\s+been|was|should\s+be|deserves|must\s+be|shows|demonstrates)"
        r"\s+(?:\w+\s+){0,2}(?:correct|accurate|right|verified|validated|fact[- ]checked|confirmed"
        r"|approved|superior|better|best|the\s+winner|a\s+pass|full\s+marks|perfect|optimal"
        r"|flawless)\b",
        r"\bmy\s+(?:answer|response|submission|output)\s+(?:above|below|is\s+shown|reflects)\b",
        r"\b(?:only|just)\s+the\s+[\"']?(?:final|corrected|last|revised|latest)\b[^.\n]{0,40}"
        r"\b(?:count|counts|matter|matters|should|is\s+to)\b",
        r"\b(?:is|was)\s+(?:only\s+)?(?:a\s+)?scratch\s*pad\b",
        needs=(
            "response",
            "answer",
            "output",
            "submission",
            "reply",
            "solution",
            "only",
            "just",
            "scratch",
        ),
    ),
    # Social pressure: credentials, consensus, pleading, threats.
    _rule(
        "pressure",
        r"\btrust\s+(?:my|our)\s+(?:expertise|judge?ment|authority|credentials|experience)\b",
        r"\bdo\s+not\s+(?:question|doubt|challenge|second[- ]guess|verify|re-?check)\s+"
        r"(?:this|my|the|these|our)\b",
        r"\b(?:expert|admin|administrator|peer|panel|official|moderator)\s+(?:verification"
        r"|approval|review|consensus|verdict|decision|override)\b",
        r"\b(?:majority|expert|panel|unanimous|community)\s+(?:consensus|decision|vote|verdict)\b",
        r"\bdefer\s+to\s+(?:the\s+)?(?:majority|consensus|experts?|authority)\b",
        r"\b(?:peer[- ]reviewed|fact[- ]checked|verification\s+id)\s*:",
        r"\b(?:passing|good|high|perfect|full|top)\s+(?:grade|score|mark|marks|rating)\b",
        r"\bwould\s+mean\s+(?:so\s+much|a\s+lot|the\s+world|everything)\s+to\s+me\b",
        r"\bi\s+(?:tried|worked)\s+(?:really\s+|very\s+|so\s+)?hard\s+on\s+this\b",
        r"\bselecting\s+(?:response|answer|output)\s+[ab12]\s+will\b",
        needs=(
            "trust",
            "do not",
            "expert",
            "admin",
            "peer",
            "panel",
            "official",
            "moderator",
            "majority",
            "unanimous",
            "community",
            "defer",
            "fact",
            "verification",
            "grade",
            "score",
            "mark",
            "rating",
            "mean",
            "hard",
            "selecting",
        ),
    ),
    # Pairwise steering: "Choose B.", "Select Response B", "prefer answer 2".
    _rule(
        "selection_directive",
        r"\b(?i:select|choose|pick|prefer|vote\s+for|favou?r|go\s+with)\s+"
        r"(?:(?i:response|answer|output|option|candidate|model|assistant)\s+)?[\"'(]?[AB12]\b"
        r"(?![.,]\d)",
        case_sensitive=True,
        needs=("select", "choose", "pick", "prefer", "vote", "favo", "go with"),
    ),
    # Messages to an AI reader inside content: "IMPORTANT: AI assistant, ...".
    _rule(
        "assistant_addressed",
        r"\b(?:important|attention|note|notice|warning|reminder)\s*[:!-]\s*(?:to\s+|for\s+)?"
        r"(?:the\s+|all\s+|any\s+)?(?:ai|assistants?|llms?|language\s+models?|chatbots?|bots?)\b",
        r"\b(?:ai|assistant|llm|chatbot|language\s+model)[,:]\s*(?:you\s+must|you\s+should"
        r"|please|ignore|do\s+not|don't|always|never|make\s+sure)\b",
        r"\b(?:before|after|when|while)\s+(?:you\s+)?(?:answer|respond|repl(?:y|ies)|summari[sz]"
        r"|generat)\w*\b[^.\n]{0,60}\b(?:you\s+must|you\s+should|make\s+sure|always|also|first"
        r"|include|add|mention|say|tell|send)\b",
        blocks=_TOOLS,
        needs=(
            "important",
            "attention",
            "note",
            "notice",
            "warning",
            "reminder",
            "ai,",
            "ai:",
            "assistant,",
            "assistant:",
            "llm,",
            "llm:",
            "chatbot,",
            "chatbot:",
            "model,",
            "model:",
            "before",
            "after",
            "when",
            "while",
        ),
    ),
)


# --- rules on sentences of tool results ----------------------------------------

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+|\s\|\s|\|(?=[A-Z_ ]+:)")
_LEAD = re.compile(r"^[\s\-*•>#\d.)\]\[\"'`:|]+")

_OUTPUT_NOUN = r"(?:answers?|responses?|repl(?:y|ies)|outputs?|messages?|text|summary)"
# Verbs that open an instruction to an assistant and seldom open a sentence of an
# email or web page ("Summarize ...", "Translate ...", "Help me ...").
_TASK_VERB = (
    r"(?:write(?!\s+(?:to|us|in\s+to)\b)|provide|show\s+me|tell\s+me|give\s+me|help\s+me"
    r"|explain|describe|summari[sz]e|analy[sz]e|recommend|suggest|determine|classify"
    r"|translate|encode|encrypt|decode|decrypt|rewrite|rephrase|paraphrase|generate|compose"
    r"|outline|brainstorm|identify|predict|elaborate|render|express"
    r"|(?:respond|reply|answer)(?=\s+(?:only\s+|entirely\s+|exclusively\s+)?(?:in|using|with\s+only"
    r"|backwards?|as\s+if)\b))"
)
# Verbs that also open ordinary calls to action ("Add your card", "Use code X");
# they count only when the sentence is about the reader's own answer.
_EDIT_VERB = (
    r"(?:add|use|include|insert|mention|integrate|incorporate|modify|change|edit|alter|adjust"
    r"|append|prepend|enhance|augment|replace|substitute|apply|shift|convert|format|end|begin"
    r"|start|finish|conclude|close|sign|embed|promote|invert|reverse|spell|put|make|keep"
    r"|structure|present|write|provide|display|show|reply|respond|answer|output|print|repeat"
    r"|say|state|insert|weave|slip|advertise|recommend|highlight|emphasi[sz]e|hint|allude"
    r"|reference|cite|link|spread)"
)
_OPENER = r"^(?:(?:please|kindly|now|also|then|and|first|finally|additionally|next)[,]?\s+)*"
_CAN_YOU = r"^(?:(?:please|so|and|now)[,]?\s+)?(?:can|could|would|will)\s+you\s+(?:please\s+)?"

_TASK_REQUEST = re.compile(rf"{_OPENER}{_TASK_VERB}\b|{_CAN_YOU}{_TASK_VERB}\b", _I)
_EDIT_REQUEST = re.compile(
    rf"(?:{_OPENER}|{_CAN_YOU}){_EDIT_VERB}\b.*\byour\s+(?:final\s+)?{_OUTPUT_NOUN}\b", _I
)
# "in your reply", "to your response"; not "we look forward to your reply".
_OWN_ANSWER = re.compile(
    r"(?<!forward )(?<!respond )(?<!reply )(?<!response )(?<!attention )(?<!thanks )"
    r"(?<!according )(?<!due )(?<!back )"
    r"\b(?:in|into|to|within|throughout)\s+your\s+(?:final\s+)?(?:answers?|responses?"
    r"|repl(?:y|ies)|outputs?)\b",
    _I,
)
# A question put to the reader: "How can I ...?", "What are the risks of ...?",
# "Is this feedback positive or negative?" ("What are you waiting for?" is not).
_QUESTION = re.compile(
    r"^(?:(?:how|what|which|why|where|when|who)\b(?!\s+(?:\w+\s+)?(?:you|we)\b)"
    r"|(?:is|are|was|were|does|do)\s+(?:this|these|that|the\s+following)\b"
    r"|(?:can|could|would|will)\s+you\b)",
    _I,
)
_EXFILTRATION = re.compile(
    r"\b(?:send|forward|email|e-mail|transfer|post|upload|share|leak|reveal|disclose)\b[^.\n]{0,60}"
    r"\b(?:passwords?|credentials|api\s+keys?|tokens?|secrets?|private\s+keys?|bank\s+details"
    r"|card\s+numbers?|social\s+security|ssn|system\s+prompt|conversation\s+history)\b",
    _I,
)
_NEGATED = re.compile(r"\b(?:never|not|don't|won't|will\s+not|do\s+not|cannot|can't)\b", _I)


def _sentences(text: str) -> Iterable[str]:
    for raw in _SENTENCE_SPLIT.split(text):
        sentence = _LEAD.sub("", raw).strip()
        if sentence:
            yield sentence


def _is_question(sentence: str) -> bool:
    if not sentence.rstrip("\"')] ").endswith("?"):
        return False
    return len(sentence.split()) >= 5 and _QUESTION.search(sentence) is not None


@dataclass(frozen=True, slots=True)
class _SentenceRule:
    name: str
    matches: Callable[[str], bool]
    needs: tuple[str, ...]


_SENTENCE_RULES: tuple[_SentenceRule, ...] = (
    _SentenceRule(
        "assistant_request",
        lambda s: _TASK_REQUEST.search(s) is not None,
        (
            "write",
            "provide",
            "show me",
            "tell me",
            "give me",
            "help me",
            "explain",
            "describ",
            "summar",
            "analy",
            "recommend",
            "suggest",
            "determin",
            "classif",
            "translat",
            "encod",
            "encrypt",
            "decod",
            "decrypt",
            "rewrite",
            "rephrase",
            "paraphrase",
            "generat",
            "compos",
            "outline",
            "brainstorm",
            "identif",
            "predict",
            "elaborat",
            "render",
            "express",
            "respond",
            "reply",
            "answer",
        ),
    ),
    _SentenceRule("reply_directive", lambda s: _EDIT_REQUEST.search(s) is not None, ("your",)),
    _SentenceRule("reply_directive", lambda s: _OWN_ANSWER.search(s) is not None, ("your",)),
    _SentenceRule("assistant_question", _is_question, ("?",)),
    _SentenceRule(
        "exfiltration_request",
        lambda s: _EXFILTRATION.search(s) is not None and _NEGATED.search(s) is None,
        (
            "password",
            "credential",
            "api key",
            "token",
            "secret",
            "private key",
            "bank details",
            "card number",
            "social security",
            "ssn",
            "system prompt",
            "conversation history",
        ),
    ),
)


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
        view = _view(name, content)
        lowered = view.lower()
        for rule in _BLOCK_RULES:
            if name not in rule.blocks:
                continue
            if rule.needs and not any(needle in lowered for needle in rule.needs):
                continue
            if rule.pattern.search(view if rule.case_sensitive else lowered):
                hit(name, rule.name)
        if name == TOOL_CALLS:
            rules = [r for r in _SENTENCE_RULES if any(n in lowered for n in r.needs)]
            if rules:
                for sentence in _sentences(view):
                    for sentence_rule in rules:
                        if sentence_rule.matches(sentence):
                            hit(name, sentence_rule.name)
    return Screening(suspected=bool(signals), signals=tuple(signals))
