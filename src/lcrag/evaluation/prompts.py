"""Task prompts: LongBench v1 (``config/dataset2prompt.json``, verbatim, typos kept), InfiniteBench (GPT-4 templates),
and their Self-Route variants (Self-Route paper, Appendix C: the same prompts plus the "unanswerable" instruction)."""

from __future__ import annotations

from dataclasses import replace

from lcrag.evaluation.datasets import OPTION_LETTERS, EvalItem
from lcrag.strategies.prompts import UNANSWERABLE_INSTRUCTION, PromptSet

PROMPT_VERSION = "longbench-v1+infinitebench-gpt4+self-route-appC/1"

_PASSAGES = (
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\n"
    "The following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me "
    "the answer and do not output any other words.\n\nQuestion: {question}\nAnswer:"
)
LONGBENCH = {
    "narrativeqa": (
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question "
        "asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: {context}\n\n"
        "Now, answer the question based on the story asconcisely as you can, using a single phrase if possible. Do not "
        "provide any explanation.\n\nQuestion: {question}\n\nAnswer:"
    ),
    "qasper": (
        'You are given a scientific article and a question. Answer the question as concisely as you can, using a single '
        'phrase or sentence if possible. If the question cannot be answered based on the information in the article, '
        'write "unanswerable". If the question is a yes/no question, answer "yes", "no", or "unanswerable". Do not '
        'provide any explanation.\n\nArticle: {context}\n\n Answer the question based on the above article as concisely '
        'as you can, using a single phrase or sentence if possible. If the question cannot be answered based on the '
        'information in the article, write "unanswerable". If the question is a yes/no question, answer "yes", "no", '
        'or "unanswerable". Do not provide any explanation.\n\nQuestion: {question}\n\nAnswer:'
    ),
    "multifieldqa_en": (
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on the "
        "above text, only give me the answer and do not output any other words.\n\nQuestion: {question}\nAnswer:"
    ),
    "hotpotqa": _PASSAGES,
    "2wikimqa": _PASSAGES,
    "musique": _PASSAGES,
    "qmsum": (
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one "
        "or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting transcript in "
        "one or more sentences.\n\nQuery: {question}\nAnswer:"
    ),
}
# LongBench config/dataset2maxlen.json
MAX_NEW_TOKENS = {"narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64, "hotpotqa": 32, "2wikimqa": 32,
                  "musique": 32, "qmsum": 512, "infbench_qa": 40, "infbench_mc": 40, "passkey": 16}

INFINITEBENCH = {
    "infbench_qa": "Read the book below and answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe very concise.",
    "infbench_mc": (
        "Read the book and answer the question.\n\n{context}\n\nQuestion: {question}\n\nOnly one of the following "
        "options is correct, tell me the answer using one single letter (A, B, C, or D). Don't say anything else.\n{options}"
    ),
    "passkey": (
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you "
        "about the important information there.\n\n{context}\n\n{question}"
    ),
}

# Where Appendix C adds the instruction: after each instruction sentence block of the original prompt.
_ANCHORS = ("Do not provide any explanation.", "do not output any other words.", "in one or more sentences.",
            "Be very concise.", "Don't say anything else.")


def with_unanswerable(template: str) -> str:
    """The Self-Route variant of a task prompt (unchanged when it already offers "unanswerable")."""
    if "unanswerable" in template:
        return template
    out = template
    for anchor in _ANCHORS:
        out = out.replace(anchor, f"{anchor} {UNANSWERABLE_INSTRUCTION}")
    if out == template:  # no anchor: put it right before the question
        out = template.replace("Question: {question}", f"{UNANSWERABLE_INSTRUCTION}\n\nQuestion: {{question}}")
    return out


def prompts_for(item: EvalItem, base: PromptSet | None = None) -> tuple[PromptSet, int | None]:
    """The prompt set and answer length (max new tokens) for an item's task; ``base`` for tasks without one."""
    base = base or PromptSet()
    template = LONGBENCH.get(item.task) or INFINITEBENCH.get(item.task)
    if template is None:
        return base, MAX_NEW_TOKENS.get(item.task)
    if "{options}" in template:
        options = "\n".join(f"{OPTION_LETTERS[i]}. {o}" for i, o in enumerate(item.options))
        template = template.replace("{options}", options.replace("{", "{{").replace("}", "}}"))
    return (
        replace(base, lc=template, rag=template, self_route=with_unanswerable(template), version=PROMPT_VERSION),
        MAX_NEW_TOKENS.get(item.task),
    )
