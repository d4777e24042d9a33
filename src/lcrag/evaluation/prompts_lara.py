"""LaRA's prompts (Alibaba-NLP/LaRA@c171553, ``evaluation/prompt.py``), verbatim, odd spaces kept: ``full_templates``
for LC and ``rag_templates`` for RAG, one per document type; Self-Route's first step is the RAG template with the
"unanswerable" instruction (:func:`lcrag.evaluation.prompts.with_unanswerable`).

Upstream sends them as the user message after the system message "You are a helpful assistant"
(``eval_utils.create_msgs``), and writes the retrieved chunks into ``{context}`` as ``f"chunk {i}: {text}." + "\\n\\n"``,
``i`` from 0 in retrieval order (``eval_rag.py``): the prompt set's ``chunk_format`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lcrag.strategies.prompts import PromptSet

LARA_PROMPT_VERSION = "lara-c171553/1"
LARA_SYSTEM = "You are a helpful assistant"
LARA_CHUNK_FORMAT = "chunk {rank}: {text}.\n\n"
# LaRA sets no limit (its API readers stop by themselves). Its gold answers are a few sentences: median 6 words
# (location) to 56 (reasoning), the longest 100 words (~130 tokens); 256 tokens let a wordier reader finish its
# answer without letting a small local one that loops run on to the window.
LARA_MAX_NEW_TOKENS = 256

LARA_FULL_TEMPLATES = {
    "paper": "Read the papers below and answer a question \n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "financial": "Read the financial statement below and answer a question \n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "book": "Read the book below and answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe concise.",
}

LARA_RAG_TEMPLATES = {
    "paper": "Here are some chunks retrieved from some papers. Read these chunks to answer a question.\n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "financial": "Here are some chunks retrieved from a financial statement. Read these chunks to answer a question. \n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "book": "Here are some chunks retrieved from a book. Read these chunks to answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe concise.",
}

LARA_TASKS = {f"lara_{kind}": kind for kind in LARA_FULL_TEMPLATES}


def lara_prompts(task: str, base: PromptSet, with_unanswerable: Callable[[str], str]) -> PromptSet | None:
    """The prompt set of a LaRA task (``lara_book``, ``lara_financial``, ``lara_paper``), else None; Self-Route's
    template is the RAG one through ``with_unanswerable`` (the caller's: imports point one way)."""
    kind = LARA_TASKS.get(task)
    if kind is None:
        return None
    rag = LARA_RAG_TEMPLATES[kind]
    return replace(base, lc=LARA_FULL_TEMPLATES[kind], rag=rag, self_route=with_unanswerable(rag), system=LARA_SYSTEM,
                   chunk_format=LARA_CHUNK_FORMAT, version=LARA_PROMPT_VERSION)
