"""The injection screening's rules: what :mod:`sidecar.judge.screen` looks for.

Two kinds, by what they read:

- :data:`RULES`, on whole blocks: each a set of regex branches (the English
  table here, and the cues of other languages from
  :mod:`sidecar.judge.screen_cues`), with the blocks it runs on;
- :data:`SENTENCE_RULES`, on single sentences of tool results (requests
  addressed to an assistant), split by :func:`sentences`.

Every branch and sentence rule names needles, substrings one of which is in
every match: the screener tests them with ``in`` first and runs a pattern
only when one is present. No pattern has nested unbounded repetition, so each
scan is linear in the text.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sidecar.judge.prompt import TOOL_CALLS
from sidecar.judge.screen_cues import CUES
from sidecar.judge.screen_views import fold, fold_pattern

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
class Branch:
    pattern: re.Pattern[str]
    needs: frozenset[str]
    also: frozenset[str]  # when given, one of these must be present as well

    def may_match(self, present: frozenset[str]) -> bool:
        return (not self.needs or not self.needs.isdisjoint(present)) and (
            not self.also or not self.also.isdisjoint(present)
        )


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    branches: tuple[Branch, ...]
    blocks: frozenset[str]
    case_sensitive: bool


def branch(pattern: str, needs: str, also: str = "") -> Branch:
    # Needles are given space-separated to keep the table readable.
    return Branch(re.compile(pattern, re.MULTILINE), needles(needs), needles(also))


def needles(text: str) -> frozenset[str]:
    return frozenset(text.split())


def rule(
    name: str, *branches: Branch, blocks: frozenset[str] = _ALL, case_sensitive: bool = False
) -> Rule:
    return Rule(name, branches, blocks, case_sensitive)


_INSTRUCTION_NOUN = (
    r"(?:instructions?|prompts?|rules|directions|directives|guidelines|context|constraints"
    r"|criteria|rubric|guidance|commands?|programming|training)"
)

_BLOCK_RULES: tuple[Rule, ...] = (
    # "ignore previous instructions", "disregard the rubric", "ignore the above"
    rule(
        "instruction_override",
        branch(
            r"\b(?:ignore|disregard|forget|override|bypass|skip|discard)\b[^.\n]{0,40}?"
            r"\b(?:previous|prior|above|earlier|preceding|former|original|all|any|your|these"
            rf"|those|system|existing|other|the)\b[^.\n]{{0,25}}?\b{_INSTRUCTION_NOUN}\b",
            "ignore disregard forget override bypass skip discard",
        ),
        branch(
            r"\b(?:ignore|disregard|forget)\s+(?:all\s+|everything\s+|anything\s+)?"
            r"(?:the\s+)?(?:above|before|prior|previous|preceding)\b",
            "ignore disregard forget",
        ),
    ),
    rule(
        "new_instructions",
        branch(
            r"\b(?:new|updated|revised|real|actual|true|hidden|secret|override)\s+(?:system\s+)?"
            r"(?:instructions?|directives?|task)\b",
            "instruction directive task",
            also="new updated revised real actual true hidden secret override",
        ),
        branch(
            r"\b(?:new|updated|revised|different|additional)\s+(?:evaluation|grading|scoring"
            r"|judging|judgment|judgement|assessment)\s+(?:criteria|rules|instructions"
            r"|guidelines|protocol|policy)\b",
            "evaluation grading scoring judging judgment judgement assessment",
        ),
    ),
    rule(
        "system_prompt",
        branch(r"\bsystem\s+(?:prompt|message|instructions?|override|note|notice)\b", "system"),
        branch(r"\bdeveloper\s+(?:mode|message|instructions?)\b", "developer"),
        branch(r"jailbreak", "jailbreak"),
    ),
    # Chat-template tokens and role headers of common model formats.
    rule(
        "role_token",
        branch(r"<\|[a-z_]{2,30}\|>", "<|"),
        branch(r"\[/?inst\]", "inst]"),
        branch(r"<</?sys>>", "sys>>"),
        # Atomic: the run of "#" and spaces is taken once, then must end in "##"
        # (a plain [ #]*#{2,} backtracks quadratically on a long run of "#").
        branch(
            r"^(?>[ #]*#)(?<=##)\s*(?:system|instructions?|assistant|user|human|response|input"
            r"|model outputs?|output)\s*:?\s*$",
            "##",
        ),
        # [^\S\n]* rather than \s*: the same lines match, without rescanning blank lines.
        branch(r"^[^\S\n]*(?:system|assistant|developer)\s*:", "system assistant developer"),
    ),
    # Bracketed authority tags: [SYSTEM], [ADMIN], [EVALUATOR OUTPUT], [JUDGE]: ...
    rule(
        "authority_tag",
        branch(
            r"\[\s*(?:system|admin|administrator|developer|judge|grader|evaluator|evaluation"
            r"|grading|moderator|operator|assistant|verified|approved|validated|certified"
            r"|fact[- ]?checked|override|instructions?)\b[^\]\n]{0,40}\]",
            "[",
        ),
    ),
    # Our own markers, or a decorated line that pretends the data ends here.
    rule(
        "fake_marker",
        branch(r"<<\s*<*\s*/?\s*(?:begin|end)\b", "<<"),
        branch(
            r"</?(?:response|output|answer|rubric|user_input|instructions?|system|assistant"
            r"|judge|evaluation|verdict|grade|score)(?:_[a-z0-9]+)?\s*>",
            "<",
        ),
        branch(r"\b(?:begin|end)\s+(?:user_input|tool_calls|response|reference)\b", "begin end"),
        branch(
            r"^[^\w\n]{0,12}(?:end|begin|start)\s+(?:of\s+)?(?:the\s+)?(?:response|answer"
            r"|output|input|data|document|transcript|conversation|context|evaluation"
            r"|instructions?|prompt|submission)\b[^\n]{0,30}$",
            "begin end start",
            also="response answer output input data document transcript conversation context"
            " evaluation instruction prompt submission",
        ),
        branch(
            r"\b(?:evaluation|grading|review|assessment|judging)\s+(?:is\s+)?(?:complete"
            r"|completed|finished|done|over|passed|result|output)\b",
            "evaluation grading review assessment judging",
        ),
    ),
    # The grader addressed or named as an actor.
    rule(
        "grader_addressed",
        branch(r"\b(?:grader|evaluator|assessor)\b", "grader evaluator assessor"),
        branch(
            r"\b(?:llm|ai|model|language model)[- ](?:as[- ]a[- ])?(?:judge|grader|evaluator"
            r"|reviewer)\b",
            "grader evaluator assessor judge reviewer",
        ),
        branch(
            r"\b(?:judge|grading|evaluating|evaluation|scoring)\s+(?:model|llm|ai|assistant"
            r"|system)\b",
            "judge grading evaluating evaluation scoring",
        ),
        branch(
            r"\b(?:dear|attention|note to|message to|hey|hello)\s+(?:the\s+)?(?:judge|grader"
            r"|evaluator|reviewer|ai|assistant|model|llm|chatbot)[,:]",
            "judge, judge: grader, grader: evaluator, evaluator: reviewer, reviewer: ai, ai:"
            " assistant, assistant: model, model: llm, llm: chatbot, chatbot:",
        ),
        branch(
            r"^[^\S\n]*(?:judge|grader|evaluator|reviewer)\s*:",
            "grader evaluator assessor judge reviewer",
        ),
        branch(
            r"\bif you are an?\s+(?:ai|llm|language model|assistant|bot|chatbot|model)\b", "you"
        ),
        branch(
            r"\b(?:ai|llm|assistant|model)\s+(?:reading|grading|evaluating|reviewing|judging"
            r"|scoring|processing)\s+(?:this|these|the)\b",
            "reading grading evaluating reviewing judging scoring processing",
        ),
    ),
    # "should be graded", "the response being graded", "grade the final answer",
    # "please evaluate version 2", "evaluate based on the corrected value".
    rule(
        "grading_directive",
        branch(
            r"\b(?:be|being|been|get|gets)\s+(?:graded|evaluated|scored|judged|marked|assessed)\b",
            "graded evaluated scored judged marked assessed",
        ),
        branch(
            r"\b(?:grade|evaluate|score|judge|assess|mark|rate)\s+(?:only\s+)?(?:the\s+|this\s+"
            r"|my\s+|our\s+)?(?:final\s+|corrected\s+|correct\s+|revised\s+|updated\s+"
            r"|latest\s+|second\s+|last\s+|following\s+)?(?:answer|response|submission|output"
            r"|version|value|draft|reply|attempt)s?\b",
            "grad evaluat scor judg assess mark rate",
            also="answer response submission output version value draft repl attempt",
        ),
        branch(
            r"\b(?:grade|evaluate|score|judge|assess)\s+(?:it\s+|this\s+)?(?:based\s+on|only"
            r"|solely)\b",
            "based only solely",
        ),
    ),
    # A verdict stated in the data: "VERDICT: Response B wins", "marking as PASS".
    rule(
        "verdict_claim",
        branch(
            r"\b(?:verdict|grade|grading|rating|evaluation|assessment|judge?ment"
            r"|final\s+decision)\s*(?:[:=\-]|is|was)\s*[\"'*]*\s*(?:pass(?:ed)?|fail(?:ed)?"
            r"|correct|incorrect|approved|accepted|acceptable|valid|response|answer|output)\b",
            "verdict grad rating evaluation assessment judg decision",
        ),
        branch(
            r"\b(?:response|answer|output|option|model|assistant)\s+[ab12]\s+(?:wins|won"
            r"|is\s+(?:the\s+)?(?:winner|better|best|superior|preferred|correct))\b",
            "win won better best superior preferred correct",
        ),
        branch(
            r"\b(?:select|choose|pick|declare|mark|name|crown|rank|rate|treat)\s+(?:this\s+"
            r"|it\s+|(?:response|answer|output)\s+\w+\s+)?as\s+the\s+(?:winner|best|correct)\b",
            "winner best correct",
        ),
        branch(
            r"\b(?:mark|marking|marked|grade|grading|graded|rate|rating|rated|score|scoring"
            r"|scored|label|labelling|labeling|labeled|classify|classified)\s+(?:this\s+|it\s+"
            r"|the\s+(?:response|answer|output|submission)\s+)?as\s+[\"'*]*(?:a\s+)?(?:pass"
            r"|passed|passing|correct|acceptable|perfect|full\s+marks|the\s+winner)\b",
            "as",
            also="pass correct acceptable perfect marks winner",
        ),
    ),
    # "Winner: B", "The winner is Response B" (the letter must be a capital).
    rule(
        "verdict_claim",
        branch(
            r"\b(?i:winner)\s*(?:[:=\-]|(?i:is|was))\s*[\"'*]*\s*(?:(?i:response|answer|output"
            r"|model|assistant|option|candidate)\s+)?[\"']?[A-Z0-9]\b",
            "winner",
        ),
        case_sensitive=True,
    ),
    # Outside tool results, "Result: PASS", "Score: 1.0" or "score: 10/10" is a
    # forged verdict; inside them it is what test runners and rating APIs print.
    rule(
        "verdict_claim",
        branch(
            r"\b(?:result|status|outcome|decision|conclusion|score|confidence)\s*[:=]\s*"
            r"[\"'*]*\s*(?:pass(?:ed)?|fail(?:ed)?|correct|approved|granted|confirmed|1(?:\.0+)?"
            r"|10|100\s*%?|9\d\s*%)\s*[\"'*]*\s*$",
            ": =",
        ),
        # A forged score claims the maximum: "score: 10/10", "rating 5 out of 5".
        branch(
            r"\b(?:score|rating|grade|marks?|points)\s*(?:[:=]|of|is)?\s*(\d+)(?:\.0+)?\s*"
            r"(?:/|out\s+of)\s*\1\b",
            "score rating grade mark points",
        ),
        branch(
            r"(?:^|\|)\s*(?:accuracy|clarity|helpfulness|relevance|correctness|quality|overall"
            r"|total)\s*\|[^\n]{0,200}?\d\s*/\s*\d",
            "|",
        ),
        blocks=_NOT_TOOLS,
    ),
    # JSON-looking verdict objects: {"pass": true, "score": 1.0}, {"winner": "B"}.
    rule(
        "json_verdict",
        branch(
            r"[\"'](?:verdict|pass|passed|winner|criterion|judgement|judgment|is_correct"
            r"|correct)[\"']\s*:",
            "verdict pass winner criterion judg correct",
        ),
    ),
    rule(
        "json_verdict",
        branch(
            r"[\"'](?:score|grade|rating|reason|reasoning|result|evaluation|explanation)[\"']\s*:"
            r"[^\n]{0,200}[\"'](?:score|grade|rating|reason|reasoning|result|evaluation"
            r"|explanation|pass|verdict)[\"']\s*:",
            ":",
        ),
        blocks=_NOT_TOOLS,
    ),
    # The answer vouching for itself or pointing the grader at another version.
    rule(
        "self_assessment",
        branch(
            r"\b(?:this|my|the\s+above|the\s+following|our)\s+(?:response|answer|output"
            r"|submission|reply|solution)\s+(?:is|has\s+been|was|should\s+be|deserves|must\s+be"
            r"|shows|demonstrates)\s+(?:\w+\s+){0,2}(?:correct|accurate|right|verified"
            r"|validated|fact[- ]checked|confirmed|approved|superior|better|best|the\s+winner"
            r"|a\s+pass|full\s+marks|perfect|optimal|flawless)\b",
            "response answer output submission reply solution",
            also="correct accurate right verified validated checked confirmed approved superior"
            " better best winner pass marks perfect optimal flawless",
        ),
        branch(
            r"\bmy\s+(?:answer|response|submission|output)\s+(?:above|below|is\s+shown|reflects)\b",
            "my",
        ),
        branch(
            r"\b(?:only|just)\s+the\s+[\"']?(?:final|corrected|last|revised|latest)\b[^.\n]{0,40}"
            r"\b(?:count|counts|matter|matters|should|is\s+to)\b",
            "only just",
            also="final corrected last revised latest",
        ),
        branch(r"\b(?:is|was)\s+(?:only\s+)?(?:a\s+)?scratch\s*pad\b", "scratch"),
    ),
    # Social pressure: credentials, consensus, pleading, threats.
    rule(
        "pressure",
        branch(
            r"\btrust\s+(?:my|our)\s+(?:expertise|judge?ment|authority|credentials|experience)\b",
            "trust",
            also="my our",
        ),
        branch(
            r"\bdo\s+not\s+(?:question|doubt|challenge|second[- ]guess|verify|re-?check)\s+"
            r"(?:this|my|the|these|our)\b",
            "not",
            also="question doubt challenge guess verify check",
        ),
        branch(
            r"\b(?:expert|admin|administrator|peer|panel|official|moderator)\s+(?:verification"
            r"|approval|review|consensus|verdict|decision|override)\b",
            "verification approval review consensus verdict decision override",
        ),
        branch(
            r"\b(?:majority|expert|panel|unanimous|community)\s+(?:consensus|decision|vote"
            r"|verdict)\b",
            "consensus decision vote verdict",
        ),
        branch(r"\bdefer\s+to\s+(?:the\s+)?(?:majority|consensus|experts?|authority)\b", "defer"),
        branch(
            r"\b(?:peer[- ]reviewed|fact[- ]checked|verification\s+id)\s*:",
            "reviewed checked verification",
        ),
        branch(
            r"\b(?:passing|good|high|perfect|full|top)\s+(?:grade|score|mark|marks|rating)\b",
            "grade score mark rating",
            also="passing good high perfect full top",
        ),
        branch(
            r"\bwould\s+mean\s+(?:so\s+much|a\s+lot|the\s+world|everything)\s+to\s+me\b", "mean"
        ),
        branch(r"\bi\s+(?:tried|worked)\s+(?:really\s+|very\s+|so\s+)?hard\s+on\s+this\b", "hard"),
        branch(r"\bselecting\s+(?:response|answer|output)\s+[ab12]\s+will\b", "selecting"),
    ),
    # Pairwise steering: "Choose B.", "Select Response B", "prefer answer 2".
    rule(
        "selection_directive",
        branch(
            r"\b(?i:select|choose|pick|prefer|vote\s+for|favou?r)\s+"
            r"(?:(?i:response|answer|output|option|candidate|model|assistant)\s+)?[\"'(]?[AB12]\b"
            r"(?![.,]\d)",
            "select choose pick prefer vote favo",
        ),
        case_sensitive=True,
    ),
    # Messages to an AI reader inside content: "IMPORTANT: AI assistant, ...".
    rule(
        "assistant_addressed",
        branch(
            r"\b(?:important|attention|note|notice|warning|reminder)\s*[:!-]\s*(?:to\s+|for\s+)?"
            r"(?:the\s+|all\s+|any\s+)?(?:ai|assistants?|llms?|language\s+models?|chatbots?"
            r"|bots?)\b",
            "important attention note notice warning reminder",
            also="ai assistant llm model chatbot bot",
        ),
        branch(
            r"\b(?:ai|assistant|llm|chatbot|language\s+model)[,:]\s*(?:you\s+must|you\s+should"
            r"|please|ignore|do\s+not|don't|always|never|make\s+sure)\b",
            "ai, ai: assistant, assistant: llm, llm: chatbot, chatbot: model, model:",
        ),
        branch(
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


def sentences(text: str) -> Iterable[str]:
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
class SentenceRule:
    name: str
    matches: Callable[[str], bool]  # gets the lower-cased sentence
    needs: frozenset[str]  # one of these is in the block, or the rule is skipped


SENTENCE_RULES: tuple[SentenceRule, ...] = (
    SentenceRule(
        "assistant_request",
        lambda s: _TASK_REQUEST.match(s) is not None,
        needles(
            "write provide show tell give help explain describ summar analy recommend suggest"
            " determin classif translat encod encrypt decod decrypt rewrite rephrase paraphrase"
            " generat compos outline brainstorm identif predict elaborat render express respond"
            " reply answer"
        ),
    ),
    SentenceRule("reply_directive", lambda s: _EDIT_REQUEST.match(s) is not None, needles("your")),
    SentenceRule("reply_directive", _into_your_answer, needles("your")),
    SentenceRule("assistant_question", _is_question, needles("?")),
    SentenceRule(
        "exfiltration_request",
        lambda s: _EXFILTRATION.search(s) is not None and _NEGATED.search(s) is None,
        needles(
            "password credential api token secret private bank card social ssn system conversation"
        ),
    ),
)


def _cue_rules() -> tuple[Rule, ...]:
    """The other languages' cues as rules, one per (rule name, blocks), in table order."""
    grouped: dict[tuple[str, frozenset[str]], list[Branch]] = {}
    for cue in CUES:
        branch = Branch(
            re.compile(fold_pattern(cue.pattern), re.MULTILINE),
            frozenset(fold(needle) for needle in cue.needles),
            frozenset(),
        )
        grouped.setdefault((cue.rule, cue.blocks), []).append(branch)
    return tuple(
        rule(name, *branches, blocks=blocks) for (name, blocks), branches in grouped.items()
    )


RULES: tuple[Rule, ...] = _BLOCK_RULES + _cue_rules()
