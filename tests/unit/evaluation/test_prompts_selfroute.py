"""Self-Route's RAG-and-Route prompts are the paper's own, word for word (Li et al. 2024, "Retrieval Augmented
Generation or Long-Context LLMs? A Comprehensive Study and Hybrid Approach", Appendix C "Prompts", Table 9 "Prompts
for each dataset"; Table 5 in the HTML version). Compared after collapsing whitespace only: the paper's table prints
each prompt as one paragraph, so line breaks are ours, but words, punctuation (its curly quotes) and typos are its."""

import pytest

from lcrag.evaluation.datasets import OPTION_LETTERS, EvalItem
from lcrag.evaluation.prompts import INFINITEBENCH, LONGBENCH, prompts_for

_U = "If the question cannot be answered based on the information in the article, write “unanswerable”."
_PASSAGES = (  # Appendix C, Table 9: HotpotQA, 2WikiMQA and MuSiQue share this text
    f"Answer the question based on the given passages. Only give me the answer and do not output any other words. {_U} "
    "The following are given passages. {context} Answer the question based on the given passages. Only give me the "
    f"answer and do not output any other words. {_U} Question: {{input}} Answer:"
)

# Appendix C, Table 9, copied from the paper; placeholders as the paper writes them ({input}, {all_classes}).
PAPER = {
    "narrativeqa": (  # Appendix C, Table 9, NarrativeQA
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question as "
        f"concisely as you can, using a single phrase if possible. Do not provide any explanation. {_U} Story: "
        "{context} Now, answer the question based on the story as concisely as you can, using a single phrase if "
        f"possible. Do not provide any explanation. {_U} Question: {{input}} Answer:"
    ),
    "qasper": (  # Appendix C, Table 9, Qasper ("input" without braces is the paper's typo)
        "You are given a scientific article and a question. Answer the question as concisely as you can, using a "
        "single phrase or sentence if possible. If the question cannot be answered based on the information in the "
        "article, write “unanswerable”. If the question is a yes/no question, answer “yes”, “no”, or “unanswerable”. "
        "Do not provide any explanation. Article: {context} Answer the question based on the above article as "
        "concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered "
        "based on the information in the article, write “unanswerable”. If the question is a yes/no question, answer "
        "“yes”, “no”, or “unanswerable”. Do not provide any explanation. Question: input Answer:"
    ),
    "multifieldqa_en": (  # Appendix C, Table 9, MultiFQA
        "Read the following text and answer briefly. {context} Now, answer the following question based on the above "
        f"text, only give me the answer and do not output any other words. {_U} Question: {{input}} Answer:"
    ),
    "hotpotqa": _PASSAGES,  # Appendix C, Table 9, HotpotQA
    "2wikimqa": _PASSAGES,  # Appendix C, Table 9, 2WikiMQA
    "musique": _PASSAGES,  # Appendix C, Table 9, MuSiQue
    "qmsum": (  # Appendix C, Table 9, QMSum
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one "
        f"or more sentences. {_U} Transcript: {{context}} Now, answer the query based on the above meeting transcript "
        f"in one or more sentences. {_U} Query: {{input}} Answer:"
    ),
    "infbench_qa": (  # Appendix C, Table 9, EN.QA
        f"Read the book and answer the question. Be very concise in your answer. {_U} {{context}} Question: {{input}} "
        f"Only give me the answer and do not output any other words. {_U} Answer:"
    ),
    "infbench_mc": (  # Appendix C, Table 9, EN.MC
        f"Read the book and answer the question. {_U} {{context}} Question: {{input}} {{all_classes}} Only output the "
        f"letter of the correct answer and do not output any other words. {_U} The letter of the correct answer is"
    ),
}

CONTEXT, QUESTION = "<the document>", "<the question?>"
OPTIONS = ["Alice {1}", "Bob", "Carol", "Dave"]  # braces: an option must reach the reader as written


def _normalised(text: str) -> str:
    return " ".join(text.split())


def _item(task: str) -> EvalItem:
    return EvalItem(id="x/0", dataset=f"bench/{task}", question=QUESTION, answers=["a"], context=CONTEXT, task=task,
                    options=OPTIONS if task == "infbench_mc" else [])


def _paper_prompt(task: str) -> str:
    """The paper's prompt as the reader would see it, options listed as lcrag lists them ("A. ..." one a line)."""
    options = "\n".join(f"{letter}. {o}" for letter, o in zip(OPTION_LETTERS, OPTIONS))
    return (PAPER[task].replace("Question: input Answer:", "Question: {input} Answer:")  # Qasper: the same slot
            .replace("{context}", CONTEXT).replace("{input}", QUESTION).replace("{all_classes}", options))


@pytest.mark.parametrize("task", list(PAPER))
def test_self_route_prompt_is_the_papers(task):
    prompts, _ = prompts_for(_item(task))
    shown = prompts.self_route.format(context=CONTEXT, question=QUESTION)
    assert _normalised(shown) == _normalised(_paper_prompt(task))


@pytest.mark.parametrize("task", list(PAPER))
def test_lc_and_rag_keep_the_benchmarks_own_prompts(task):
    """Table 9 gives Self-Route's prompts only; LC and RAG still ask with LongBench's and ∞Bench's GPT-4 prompts."""
    prompts, _ = prompts_for(_item(task))
    own = (LONGBENCH.get(task) or INFINITEBENCH[task]).split("{options}")[0]  # MC: up to lcrag's filled options
    assert prompts.lc == prompts.rag and prompts.lc.startswith(own)
