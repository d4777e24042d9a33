"""Answer and question text as the scorers, Self-Route and routers read it. Here, below every stage, because both
strategies (Self-Route's decline test, a router's question type) and evaluation (the official scorers) use it and
strategies must not import from evaluation."""

from __future__ import annotations

import re
import string
from functools import lru_cache

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """LongBench/SQuAD: lower case, drop punctuation, drop articles, collapse white space."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


QUESTION_WORDS = ("who", "what", "where", "when", "which", "how", "why")


def question_type(question: str) -> str:
    """who/what/where/when/which/how/why, yes-no (starts with an auxiliary verb), or other."""
    words = question.lower().replace("?", " ").split()
    for w in words[:3]:
        if w in QUESTION_WORDS:
            return w
    if words and words[0] in {"is", "are", "was", "were", "do", "does", "did", "can", "could", "has", "have", "had",
                              "will", "would", "should"}:
        return "yes-no"
    return "other"


# A decline in the reader's own words ("not mentioned in the provided chunks", "the text does not specify…",
# "None mentioned"), as strong readers write it when a prompt does not offer "unanswerable": the written signal of
# Self-Route's rule, of LaRA's hallucination task, and of a router's "RAG found nothing" feature. Read generally
# rather than phrase by phrase: within one clause, a negation, a verb of saying or finding and a reference to the
# source ("the excerpt never reveals…", "I could not locate … in the material"), or an absence said of the source's
# information ("no details about … are given"). lcrag.evaluation.decline_families generates the wordings it is
# checked on, some of them held out from the ones it was written from. A "not" alone ("he did not attend") is no
# decline: the clause must be about the source or what it says.
_NEG = re.compile(r"(?:\b(?:not|never|no|nothing|nowhere|none|cannot|unable|fails?|failed|silent|stops? short"
                  r"|lacks?)\b|n't\b)", re.I)
_SAYING = re.compile(
    r"\b(?:say|said|mention|stat(?:e|es|ed|ing)\b|specif|provid|giv|given|find|found|locat|contain|includ|discuss"
    r"|indicat|describ|address|cover|detail|disclos|report|list|reveal|offer|explain|clarif|identif|referenc"
    r"|present|availab|determin|confirm|see\b|seen|tell|told|answer|noted?\b|touch|record|spell|come across"
    r"|came across|information|info\b|data\b|evidence|indication|explicit|specific|clear)", re.I)
_SOURCE = re.compile(
    r"\b(?:text|texts|document|documents|passages?|context|paper|book|chunks?|excerpts?|sources?|materials?"
    r"|article|report|filing|story|novel|statement|records?|sections?|content|provided|retrieved|given"
    r"|anywhere|(?:this|the|any|such) information)\b", re.I)
_UNSTATED = re.compile(r"\b(?:unclear|not clear|uncertain|unknown|not known|unspecified|unstated|unmentioned"
                       r"|undisclosed|impossible to (?:say|tell|determine|know)|silent (?:on|about))\b", re.I)
_NO_MENTION = re.compile(
    r"\bno (?:mention|information|info|details?|data|indication|evidence|record|reference|description|specifics"
    r"|discussion|explanation|statement)s?\b", re.I)
_WORDS = re.compile(r"[A-Za-z0-9']+")
_CLAUSE_BREAK = re.compile(r"[.;!?](?:\s|$)|[:\n()]|,\s*(?:but|however|though|although|yet|so|still)\b", re.I)


def _declining_clause(clause: str) -> bool:
    """One clause says the source lacks something: a negation before a verb of saying or finding, with the source
    named ("the excerpt never reveals …"); "unclear"/"unknown" with the source named; or "no mention/information
    of …". Any of the three alone ("he did not attend", "the report shows …") is not enough."""
    if _NO_MENTION.search(clause):
        return True
    if not _SOURCE.search(clause):
        return False
    if _UNSTATED.search(clause) or re.search(r"\b(?:see|find|found)\s+(?:nothing|no)\b", clause, re.I):
        return True
    # the verb close after the negation ("does not explicitly say", "never once reveals"), not a clause later
    # ("nothing"/"nowhere" lead a clause whose verb comes at its end: "Nothing about X is recorded in the text")
    return any(_SAYING.search(clause, n.start(), len(clause) if n.group(0).lower() in ("nothing", "nowhere")
                              else n.end() + 40) for n in _NEG.finditer(clause))


def _declines_generally(text: str) -> bool:
    return any(_declining_clause(clause) for clause in _CLAUSE_BREAK.split(text) if clause)


_DECLINE = re.compile(
    r"\b(not (?:explicitly |specifically |directly |clearly )?(?:mentioned|mention|provided|specified|stated|included"
    r"|available|given|discussed|described|addressed|covered|contained|indicated|detailed|listed"
    r"|disclosed|reported)"
    r"|(?:does|do|did|is|are|was|were)\s?n[o']t (?:explicitly |specifically |directly |clearly )?(?:mention|provide"
    r"|specify|state|contain|include|say|indicate|describe|discuss|address|cover|give|detail|list|disclose|report)"
    r"|cannot be (?:determined|answered|found|inferred)|can ?not (?:determine|answer|find|be found)"
    r"|unable to (?:determine|find|answer|locate)|unanswerable"
    r"|isn't (?:mentioned|provided)|not possible to (?:determine|say|tell|know)|i (?:could|can|did) ?n[o']t find"
    r"|none (?:is |are |was )?(?:mentioned|specified|given|stated|provided)"
    r"|not (?:in|part of) the (?:text|paper|book|document|statement|chunks?))\b", re.I)
_BARE_DECLINE = re.compile(
    r"\s*(?:none|n/?a|unknown|nothing|unanswerable|no answer|not (?:stated|mentioned|given|specified|provided|known"
    r"|available|found|answerable|determinable|in the (?:text|document)))\b[\s.!]*$|\s*(?:none|n/?a|unknown)\b",
    re.I)
_HEDGE = re.compile(r"\b(explicit|explicitly|specific|specifically|directly|detailed|exact|unclear|not clear"
                    r"|implied|implies|suggests?|appears? to|seems? to|possibly|presumably|perhaps|not confirm"
                    r"|doesn't confirm|does not confirm)\b", re.I)


def declines(text: str) -> bool:
    """The answer says the text does not hold what was asked ("unanswerable" included), anywhere in it."""
    return bool(_DECLINE.search(text) or _declines_generally(text) or _BARE_DECLINE.match(text))


def declines_first(text: str) -> bool:
    """The answer leads with a decline: its first sentence declines before it says anything else ("The text does
    not say directly, but X" and "Sorry, the text does not say" do; "X, although the text does not specify Y", an
    answer with a caveat at the end, does not)."""
    first = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
    if _BARE_DECLINE.match(first) or _DECLINE.search(first) and not _declines_generally(first):
        return True
    said = 0
    for clause in _CLAUSE_BREAK.split(first):
        if _declining_clause(clause) or _DECLINE.search(clause):
            return True
        said += len(_WORDS.findall(clause))
        if said > 3:  # more than a courtesy ("I'm sorry", "Unfortunately") before it: an answer, then a caveat
            return False
    return False


def hedges(text: str) -> bool:
    """The answer qualifies itself ("not explicitly", "no specific", "it is unclear", "suggests"): a partial
    decline, or one with a guess."""
    return bool(_HEDGE.search(text))


# Function words and words every question about a document uses: what is left says what a text is about.
_STOP = frozenset(
    "a an the of to in and or for on at by with from as is are was were be been being that this these those it its "
    "which who whom what when where why how did do does done has have had not no but if than then so such into about "
    "over under after before between during their there they them his her he she him i you we our your paper papers "
    "text book chunk chunks provided according mentioned also while both each other more most can could would should "
    "may might will".split())
WORD = re.compile(r"[a-z0-9]+")


# Kept: a citation stems every word of the passages it quotes (~900 a question, half of a BM25 question's time in
# the service), and a text's words repeat; bounded, and each entry a short word.
@lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, lightly stemmed words without function words: what a text says."""
    return {_stem(w) for w in WORD.findall(text.lower()) if w not in _STOP}


# What a chunker counts as a word: a run of non-space characters, at most MAX_WORD_CHARS of them (a URL, a base64
# blob or a script written without spaces, Thai say, would otherwise be one "word" the size of the text), and each
# character of the scripts written without spaces between words alone (CJK ideographs, kana, their punctuation).
MAX_WORD_CHARS = 64
# The letters of scripts written without spaces between words (CJK ideographs, kana), and with them the CJK and
# full-width punctuation and forms.
UNSPACED_LETTERS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_UNSPACED = f"\u3000-\u303f\uff00-\uffef{UNSPACED_LETTERS}"
CHUNK_WORD = re.compile(f"[{_UNSPACED}]|[^\\s{_UNSPACED}]{{1,{MAX_WORD_CHARS}}}")
