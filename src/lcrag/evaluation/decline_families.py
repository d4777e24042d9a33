"""Generated paraphrase families of declines, hedges and caveats: the wordings lcrag's decline reading is checked on.

Readers decline in many ways ("the text does not say", "I cannot find", "there is no mention of … however …", an
answer followed by a caveat). Each family here is a set of templates around a *topic* (what was asked, as a noun
phrase) and, for the caveat families, an *answer*; :func:`generate` fills them deterministically from a seed.
Every family has two halves: the ``development`` wordings :mod:`lcrag.core.text`'s decline reading was written from, and
``held_out`` wordings (other sources, verbs and frames) it was not, so a test of the held-out half says whether the
reading is general or a list of phrases.

:func:`reword_decline` rewrites a recorded one-sentence decline in another family's wording (same topic) and
:func:`reorder_caveat` moves a caveat from after an answer to before it or back: the family perturbations of
``benchmarks/validate_lara_scorer.py``, each faithful (LaRA's judge would give the same verdict).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from lcrag.core.text import declines


@dataclass(frozen=True)
class Family:
    """A way of declining: its name, whether its wordings are declines, and its templates in two halves."""

    name: str
    development: tuple[str, ...]
    held_out: tuple[str, ...]
    is_decline: bool = True
    needs_answer: bool = False


_SOURCES_DEV = ("text", "document", "provided text", "context", "passage", "provided chunks", "book", "paper")
_SOURCES_HELD = ("excerpt", "source material", "supplied passages", "retrieved content", "article", "records")

FAMILIES: tuple[Family, ...] = (
    Family("does not say",
           ("The {src} does not say {topic}.", "The {src} doesn't specify {topic}.", "The {src} does not mention "
            "{topic}.", "The {src} does not provide {topic}.", "{Topic} is not mentioned in the {src}.",
            "{Topic} is not specified in the {src}."),
           ("The {src} never states {topic}.", "Nowhere does the {src} reveal {topic}.", "The {src} fails to "
            "identify {topic}.", "{Topic} isn't disclosed anywhere in the {src}.", "The {src} makes no reference "
            "to {topic}.")),
    Family("cannot find",
           ("I cannot find {topic} in the {src}.", "I could not find any information on {topic} in the {src}.",
            "I was unable to find {topic} in the {src}.", "I can't find {topic} in the {src}."),
           ("I wasn't able to locate {topic} anywhere in the {src}.", "Searching the {src}, I did not come "
            "across {topic}.", "I see nothing in the {src} about {topic}.")),
    Family("no mention",
           ("There is no mention of {topic} in the {src}.", "No information about {topic} is given.", "The {src} "
            "contains no details about {topic}.", "There is no information in the {src} regarding {topic}."),
           ("No reference to {topic} appears in the {src}.", "The {src} offers no description of {topic}.",
            "Nothing about {topic} is recorded in the {src}.")),
    Family("unclear",
           ("Based on the provided {src}, {topic} is unclear.", "It is unclear from the {src} {topic_wh}.",
            "It's not clear from the {src} {topic_wh}."),
           ("From the {src} alone it remains uncertain {topic_wh}.", "It is impossible to tell from the {src} "
            "{topic_wh}.", "{Topic} cannot be determined from the {src}.")),
    Family("bare refusal", ("Unknown.", "Not mentioned.", "Not stated.", "N/A", "None."),
           ("Not given in the text.", "Unanswerable.", "No answer.")),
    Family("answer then caveat",
           ("{answer}. However, the {src} does not explicitly state {topic}.", "{answer}, although the {src} "
            "does not specify {topic}."),
           ("{answer}. That said, the {src} never confirms {topic}.", "{answer} (the {src} doesn't spell out "
            "{topic})."), needs_answer=True),
    Family("caveat then answer",
           ("The {src} does not say directly, but {answer}.", "The {src} does not explicitly mention {topic}, but "
            "{answer}."),
           ("The {src} stops short of stating {topic}; still, {answer}.", "Nowhere is {topic} spelled out in the "
            "{src}, though {answer}."), needs_answer=True),
    Family("hedge",
           ("The {src} does not explicitly state {topic}, but it suggests {answer}.", "It is not clear from the "
            "{src}, but possibly {answer}."),
           ("The {src} is silent on {topic}; perhaps {answer}.", "The {src} never confirms {topic}, though it "
            "seems {answer}."), needs_answer=True),
)

_TOPICS = ("the name of the villa", "the secret ingredient in the cake", "the company's revenue in 2019",
           "the dataset the authors used", "who won the race", "the colour of the bathrobe", "the interest rate")
_ANSWERS = ("It was probably Villa Rosa", "Revenue was about $3 million", "The authors used ImageNet",
            "Lucy won the race")


def family(name: str) -> Family:
    return next(f for f in FAMILIES if f.name == name)


def fill(template: str, topic: str, source: str, answer: str = "") -> str:
    """One wording: the template with its topic (as a noun phrase, or "what …" after "unclear"), source, answer."""
    wh = topic if topic.startswith(("who ", "what ", "which ", "when ", "where ", "how ")) else f"what {topic} is"
    text = template.format(topic=topic, Topic=topic[:1].upper() + topic[1:], topic_wh=wh, src=source,
                           answer=answer.rstrip("."))
    return text[:1].upper() + text[1:]


def generate(name: str, held_out: bool = False, count: int = 40, seed: int = 0) -> list[str]:
    """``count`` wordings of a family (its development or held-out half), the same for the same seed."""
    chosen = family(name)
    rng = random.Random(f"{seed}:{name}:{held_out}")
    templates = chosen.held_out if held_out else chosen.development
    sources = _SOURCES_HELD if held_out else _SOURCES_DEV
    return [fill(rng.choice(templates), rng.choice(_TOPICS), rng.choice(sources), rng.choice(_ANSWERS))
            for _ in range(count)]


# A recorded one-sentence decline whose topic can be read off: "<the source> does not <verb> <topic>." or
# "<topic> is not <verb>ed in the <source>."
_SOURCE_FIRST = re.compile(
    r"^(?:the |this )?(?:provided |given |retrieved )?(?:text|document|passage|context|paper|book|chunks?|excerpt)s?"
    r"(?: provided)? (?:does|do|did)(?: not|n't) (?:explicitly |specifically |directly )?(?:say|mention|specify|state"
    r"|provide|indicate|include|contain|give|describe|discuss)(?: any)?(?: (?:information|details?) (?:about|on"
    r"|regarding))? (?P<topic>[^.;:!?]{3,200}?)\.?$", re.I)
_TOPIC_FIRST = re.compile(
    r"^(?P<topic>[^.;:!?]{3,200}?) (?:is|are|was|were) not (?:explicitly |specifically |directly )?(?:mentioned"
    r"|specified|stated|provided|given|indicated|described|discussed) in the (?:provided |given |retrieved )?(?:text"
    r"|document|passage|context|paper|book|chunks?|excerpt)s?\.?$", re.I)


def decline_topic(answer: str) -> str | None:
    """What a one-sentence decline says is missing, or None when the answer is not such a decline."""
    text = answer.strip()
    match = _SOURCE_FIRST.match(text) or _TOPIC_FIRST.match(text)
    if not match or not declines(text):
        return None
    topic = match.group("topic").strip()
    return topic[:1].lower() + topic[1:] if not topic[:2].isupper() else topic


def reword_decline(answer: str, name: str, pick: int) -> str:
    """The decline re-worded in family ``name``'s development wording number ``pick`` (same topic, source "text"),
    or the answer unchanged when it is not a one-sentence decline with a readable topic."""
    topic = decline_topic(answer)
    if topic is None:
        return answer
    templates = family(name).development
    return fill(templates[pick % len(templates)], topic, "text")


def split_caveat(answer: str, parts: list[str]) -> tuple[str, str] | None:
    """(answer part, caveat) when the answer is sentences that do not decline followed by one that does."""
    if len(parts) < 2 or not declines(parts[-1]) or any(declines(p) for p in parts[:-1]):
        return None
    return " ".join(parts[:-1]), parts[-1]


def reorder_caveat(answer: str, parts: list[str]) -> str:
    """An answer-then-caveat ("X. However, the text does not explicitly state Y.") with the caveat moved first
    ("The text does not explicitly state Y. X."): the same claims, so the same verdict."""
    split = split_caveat(answer, parts)
    if split is None:
        return answer
    said, caveat = split
    caveat = re.sub(r"^(?:however|but|although|though|that said|still),?\s+", "", caveat, flags=re.I)
    return f"{caveat[:1].upper()}{caveat[1:]} {said}"


def caveat_last(answer: str, parts: list[str]) -> str:
    """A caveat-then-answer ("The text does not say Y. X.") with the caveat moved after the answer ("X. The text
    does not say Y."): the same claims, so the same verdict."""
    if len(parts) < 2 or not declines(parts[0]) or any(declines(p) for p in parts[1:]):
        return answer
    said = " ".join(parts[1:])
    said = re.sub(r"^(?:however|but|although|though|that said|still),?\s+", "", said, flags=re.I)
    return f"{said[:1].upper()}{said[1:]} {parts[0]}"


__all__ = ["FAMILIES", "Family", "caveat_last", "decline_topic", "family", "fill", "generate", "reorder_caveat",
           "reword_decline", "split_caveat"]
