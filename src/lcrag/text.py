"""Answer and question text as the scorers, Self-Route and routers read it. Here, below every stage, because both
strategies (Self-Route's decline test, a router's question type) and evaluation (the official scorers) use it and
strategies must not import from evaluation."""

from __future__ import annotations

import re
import string

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
# Self-Route's rule, of LaRA's hallucination task, and of a router's "RAG found nothing" feature.
_DECLINE = re.compile(
    r"\b(not (?:explicitly |specifically |directly |clearly )?(?:mentioned|mention|provided|specified|stated|included"
    r"|available|found|given|discussed|described|addressed|covered|contained|present|indicated|detailed|listed"
    r"|disclosed|reported)"
    r"|(?:does|do|did|is|are|was|were)\s?n[o']t (?:explicitly |specifically |directly |clearly )?(?:mention|provide"
    r"|specify|state|contain|include|say|indicate|describe|discuss|address|cover|give|detail|list|disclose|report"
    r"|appear|exist|have)"
    r"|no (?:mention|information|details?|indication|evidence|record|data|reference)"
    r"|cannot be (?:determined|answered|found|inferred)|can ?not (?:determine|answer|find|be found)"
    r"|unable to (?:determine|find|answer|locate)|unanswerable|there (?:is|are|was|were) no"
    r"|isn't (?:mentioned|provided)|not possible to determine|i (?:could|can) ?n[o']t find|no such"
    r"|none (?:is |are |was )?(?:mentioned|specified|given|stated|provided)|no (?:specific|particular|explicit)"
    r"|not applicable|not (?:in|part of) the (?:text|paper|book|document|statement|chunks?)"
    r"|did not (?:use|have|mention|give|do) any)\b", re.I)
_BARE_DECLINE = re.compile(r"\s*(none|n/?a|unknown|nothing)\b", re.I)
_HEDGE = re.compile(r"\b(explicit|explicitly|specific|specifically|directly|detailed|exact)\b", re.I)


def declines(text: str) -> bool:
    """The answer says the text does not hold what was asked ("unanswerable" included), anywhere in it."""
    return bool(_DECLINE.search(text) or _BARE_DECLINE.match(text))


def declines_first(text: str) -> bool:
    """The answer's first sentence declines: the answer is a decline, not an answer with a caveat at the end."""
    return declines(re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0])


def hedges(text: str) -> bool:
    """The answer qualifies itself ("not explicitly", "no specific"): a partial decline, or one with a guess."""
    return bool(_HEDGE.search(text))


# Function words and words every question about a document uses: what is left says what a text is about.
_STOP = frozenset(
    "a an the of to in and or for on at by with from as is are was were be been being that this these those it its "
    "which who whom what when where why how did do does done has have had not no but if than then so such into about "
    "over under after before between during their there they them his her he she him i you we our your paper papers "
    "text book chunk chunks provided according mentioned also while both each other more most can could would should "
    "may might will".split())
WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, lightly stemmed words without function words: what a text says."""
    return {_stem(w) for w in WORD.findall(text.lower()) if w not in _STOP}
