"""Synthetic long documents with planted facts and a passkey (needle-in-a-haystack, in the style of ∞Bench)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lcrag.core.errors import InputError
from lcrag.core.tokenization import Tokenizer, count_tokens
from lcrag.core.types import Document

_SUBJECTS = ["The old miller", "A quiet fisherman", "The baker's daughter", "The village clerk", "A travelling tinker",
             "The schoolmaster", "An elderly shepherd", "The ferryman", "A young carpenter", "The innkeeper"]
_VERBS = ["repaired", "carried", "painted", "counted", "sold", "found", "polished", "measured", "borrowed", "mended"]
_OBJECTS = ["a wooden cart", "the garden gate", "three copper pots", "a bundle of letters", "the chapel bell",
            "a basket of apples", "the broken fence", "an old lantern", "a coil of rope", "the market stall"]
_PLACES = ["near the river", "before the morning fog lifted", "behind the granary", "at the edge of the moor",
           "during the autumn fair", "beside the stone bridge", "in the narrow lane", "after the evening rain"]
_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


@dataclass(frozen=True)
class PlantedFact:
    sentence: str
    question: str
    answer: str


DEFAULT_FACTS = (
    PlantedFact(
        "The lighthouse keeper on Gull Island is named Marta Quillon.",
        "What is the name of the lighthouse keeper on Gull Island?",
        "Marta Quillon",
    ),
    PlantedFact(
        "The secret ingredient in the harbour bakery's rye bread is cardamom.",
        "What is the secret ingredient in the harbour bakery's rye bread?",
        "cardamom",
    ),
    PlantedFact(
        "The silver key to the old observatory is hidden inside a blue teapot.",
        "Where is the silver key to the old observatory hidden?",
        "blue teapot",
    ),
    PlantedFact(
        "Captain Orsolya Brenn sailed the schooner Meridian to Valparaiso in 1887.",
        "Which schooner did Captain Orsolya Brenn sail to Valparaiso?",
        "Meridian",
    ),
    PlantedFact(
        "The password for the museum's archive room is juniper-seventeen.",
        "What is the password for the museum's archive room?",
        "juniper-seventeen",
    ),
)


def passkey_fact(passkey: int) -> PlantedFact:
    return PlantedFact(
        f"The pass key is {passkey}. Remember it. {passkey} is the pass key.", "What is the pass key?", str(passkey)
    )


def depths(n: int, first: float = 0.2, last: float = 0.8) -> list[float]:
    """``n`` depths spread evenly from ``first`` to ``last`` of the text."""
    return [first + (last - first) * i / max(1, n - 1) for i in range(n)]


def plant(document: Document, needles: list[PlantedFact], first: float = 0.1, last: float = 0.9) -> Document:
    """``document`` with each needle inserted as its own paragraph at a paragraph break near its depth."""
    text = document.text
    inserts: list[tuple[int, str]] = []
    for needle, depth in zip(needles, depths(len(needles), first, last)):
        at = int(len(text) * depth)
        brk = text.find("\n\n", at)
        pos = brk if brk != -1 else len(text)
        inserts.append((pos, f"\n\n{needle.sentence}"))
    for pos, sentence in sorted(inserts, reverse=True):
        text = text[:pos] + sentence + text[pos:]
    return Document(text=text, id=f"{document.id}+needles", title=document.title, source=document.source)


def filler_sentences(rng: random.Random, n_words: int) -> list[str]:
    sentences: list[str] = []
    words = 0
    while words < n_words:
        if rng.random() < 0.2:
            sentence = _FILLER
        else:
            sentence = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_PLACES)}."
        sentences.append(sentence)
        words += len(sentence.split())
    return sentences


def needle_document(
    n_words: int = 2000,
    facts: tuple[PlantedFact, ...] = DEFAULT_FACTS[:2],
    passkey: int | None = None,
    seed: int = 0,
) -> tuple[Document, list[PlantedFact]]:
    """A document of about ``n_words`` filler words with ``facts`` and a passkey planted at spread-out depths.

    Returns the document and the planted facts with their questions and answers (the passkey last).
    """
    rng = random.Random(seed)
    needles = [*facts, passkey_fact(passkey if passkey is not None else rng.randint(10000, 99999))]
    sentences = filler_sentences(rng, n_words)
    for needle, depth in zip(needles, depths(len(needles))):
        sentences.insert(int(len(sentences) * depth), needle.sentence)
    paragraphs = [" ".join(sentences[i : i + 6]) for i in range(0, len(sentences), 6)]
    text = "\n\n".join(paragraphs) + "\n"
    return Document(text=text, id=f"needles-{seed}", title="Synthetic needle document", source="lcrag.documents.synthetic"), needles


def corpus_records(
    n_docs: int, words_per_doc: int = 100, facts: tuple[PlantedFact, ...] = (), seed: int = 0
) -> Iterator[dict]:
    """A synthetic corpus, one record at a time (``id``, ``title``, ``text``): filler documents, each naming one
    other document's title (so mention-based grouping has something to link), with ``facts`` planted one per
    document at spread-out positions. Generated lazily: a million records never sit in memory."""
    rng = random.Random(seed)
    planted = {int(n_docs * d): fact for d, fact in zip(depths(len(facts), 0.1, 0.9), facts)} if facts else {}
    for i in range(n_docs):
        sentences = filler_sentences(rng, words_per_doc)
        sentences.insert(rng.randrange(len(sentences) + 1), f"It is often compared with Record {rng.randrange(n_docs)}.")
        if i in planted:
            sentences.insert(rng.randrange(len(sentences) + 1), planted[i].sentence)
        yield {"id": f"r{i}", "title": f"Record {i}", "text": " ".join(sentences)}


# -- PassKey (∞Bench) and the Self-Route paper's two variants (§5.4) ----------------------------------------------
PASSKEY_QUESTIONS = {
    "passkey": "What is the pass key?",  # ∞Bench
    "special-token": "What is the special token hidden inside the texts?",  # Self-Route §5.4: RAG falls to 4.6%
    "two-passkeys": "Which passkey is larger? First or second?",  # Self-Route §5.4: two needles, compare them
}


def passkey_context(tokenizer: Tokenizer, tokens: int, needles: list[tuple[float, str]]) -> str:
    """∞Bench's haystack: the noise sentence block repeated to about ``tokens`` reader tokens, each needle inserted
    between repetitions at its depth (0 = start, 1 = end)."""
    noise = _FILLER
    # Marginal counts (a block as it sits between others), so a word's leading space is counted with it.
    base = count_tokens(tokenizer, noise)
    per = count_tokens(tokenizer, f"{noise} {noise}") - base
    room = tokens - sum(count_tokens(tokenizer, f"{noise} {text}") - base for _, text in needles)
    blocks = [noise] * max(1, round(room / per))
    for depth, text in sorted(needles, key=lambda n: -n[0]):  # from the back, so earlier positions stay put
        blocks.insert(round(len(blocks) * min(max(depth, 0.0), 1.0)), text)
    return " ".join(blocks)


def passkey_records(tokenizer: Tokenizer, lengths: list[int], depths_: list[float],
                    variants: Sequence[str] = tuple(PASSKEY_QUESTIONS), seed: int = 0) -> Iterator[dict]:
    """Generic-format evaluation records (``lcrag eval`` reads them), one per variant × length × depth.

    ``two-passkeys`` puts the second needle half a document after the first (wrapping round), so both depths vary;
    its answer is "first" or "second" (metric ``first_second``); the others are scored as ∞Bench does (first
    integer of the answer equals the key).
    """
    rng = random.Random(seed)
    for variant in variants:
        if variant not in PASSKEY_QUESTIONS:
            raise InputError(f"unknown PassKey variant {variant!r}; choose from {', '.join(PASSKEY_QUESTIONS)}")
        for length in lengths:
            for depth in depths_:
                key = rng.randint(10000, 99999)
                needles = [(depth, passkey_fact(key).sentence)]
                answer, metric = str(key), "passkey"
                if variant == "two-passkeys":
                    other = rng.choice([k for k in range(10000, 100000, 997) if k != key])
                    second = (depth + 0.5) % 1.0
                    needles.append((second, passkey_fact(other).sentence))
                    first_key, second_key = (key, other) if depth <= second else (other, key)
                    answer, metric = ("first" if first_key > second_key else "second"), "first_second"
                yield {"id": f"{variant}-{length}-d{depth:g}", "dataset": f"passkey/{variant}", "task": "passkey",
                       "metric": metric, "question": PASSKEY_QUESTIONS[variant], "answers": [answer],
                       "context": passkey_context(tokenizer, length, needles),
                       "meta": {"variant": variant, "length": length, "depth": depth}}
