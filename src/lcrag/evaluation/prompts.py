"""Task prompts: LongBench v1's 21 tasks (``config/dataset2prompt.json``, verbatim, typos kept), InfiniteBench (GPT-4
templates, ``src/prompt.py``), and their Self-Route variants: the Self-Route paper's own (Appendix C, Table 9) for the
nine tasks it gives, else the task's prompt plus the "unanswerable" instruction (prompts without a question, e.g.
summaries, code and the Chinese tasks, stay as they are). Answer lengths are the benchmarks' own max new tokens."""

from __future__ import annotations

from dataclasses import replace

from lcrag.evaluation.datasets import OPTION_LETTERS, EvalItem
from lcrag.evaluation.prompts_lara import LARA_MAX_NEW_TOKENS, lara_prompts
from lcrag.strategies.prompts import UNANSWERABLE_INSTRUCTION, PromptSet

# /2: all 21 LongBench tasks, ∞Bench PassKey's own words; /3: Self-Route's prompts are Appendix C's words
PROMPT_VERSION = "longbench-v1+infinitebench-gpt4+self-route-appC/3"

# LongBench v1 config/dataset2prompt.json (THUDM/LongBench@2e00731), verbatim: typos and odd spacing kept;
# ``{input}`` is the question.
_DATASET2PROMPT = {
    "narrativeqa": (
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the "
        "question asconcisely as you can, using a single phrase if possible. Do not provide any "
        "explanation.\n\nStory: {context}\n\nNow, answer the question based on the story asconcisely as "
        "you can, using a single phrase if possible. Do not provide any explanation.\n\nQuestion: "
        "{input}\n\nAnswer:"
    ),
    "qasper": (
        "You are given a scientific article and a question. Answer the question as concisely as you can, "
        "using a single phrase or sentence if possible. If the question cannot be answered based on the "
        "information in the article, write \"unanswerable\". If the question is a yes/no question, answer "
        "\"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nArticle: {context}\n\n "
        "Answer the question based on the above article as concisely as you can, using a single phrase or "
        "sentence if possible. If the question cannot be answered based on the information in the article, "
        "write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or "
        "\"unanswerable\". Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:"
    ),
    "multifieldqa_en": (
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question "
        "based on the above text, only give me the answer and do not output any other words.\n\nQuestion: "
        "{input}\nAnswer:"
    ),
    "multifieldqa_zh": (
        "阅读以下文字并用中文简短回答：\n\n{context}\n\n现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。\n\n问题：{input}\n回答："
    ),
    "hotpotqa": (
        "Answer the question based on the given passages. Only give me the answer and do not output any "
        "other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the "
        "given passages. Only give me the answer and do not output any other words.\n\nQuestion: "
        "{input}\nAnswer:"
    ),
    "2wikimqa": (
        "Answer the question based on the given passages. Only give me the answer and do not output any "
        "other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the "
        "given passages. Only give me the answer and do not output any other words.\n\nQuestion: "
        "{input}\nAnswer:"
    ),
    "musique": (
        "Answer the question based on the given passages. Only give me the answer and do not output any "
        "other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the "
        "given passages. Only give me the answer and do not output any other words.\n\nQuestion: "
        "{input}\nAnswer:"
    ),
    "dureader": (
        "请基于给定的文章回答下述问题。\n\n文章：{context}\n\n请基于上述文章回答下面的问题。\n\n问题：{input}\n回答："
    ),
    "gov_report": (
        "You are given a report by a government agency. Write a one-page summary of the "
        "report.\n\nReport:\n{context}\n\nNow, write a one-page summary of the report.\n\nSummary:"
    ),
    "qmsum": (
        "You are given a meeting transcript and a query containing a question or instruction. Answer the "
        "query in one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the "
        "above meeting transcript in one or more sentences.\n\nQuery: {input}\nAnswer:"
    ),
    "multi_news": (
        "You are given several news passages. Write a one-page summary of all news. "
        "\n\nNews:\n{context}\n\nNow, write a one-page summary of all the news.\n\nSummary:"
    ),
    "vcsum": (
        "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n会议记录：\n{context}\n\n会议总结："
    ),
    "trec": (
        "Please determine the type of the question below. Here are some examples of "
        "questions.\n\n{context}\n{input}"
    ),
    "triviaqa": (
        "Answer the question based on the given passage. Only give me the answer and do not output any "
        "other words. The following are some examples.\n\n{context}\n\n{input}"
    ),
    "samsum": (
        "Summarize the dialogue into a few short sentences. The following are some "
        "examples.\n\n{context}\n\n{input}"
    ),
    "lsht": (
        "请判断给定新闻的类别，下面是一些例子。\n\n{context}\n{input}"
    ),
    "passage_count": (
        "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please "
        "carefully read these paragraphs and determine how many unique paragraphs there are after removing "
        "duplicates. In other words, how many non-repeating paragraphs are there in "
        "total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after removing "
        "duplicates. The output format should only contain the number, such as 1, 2, 3, and so on.\n\nThe "
        "final answer is: "
    ),
    "passage_retrieval_en": (
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph "
        "the abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter "
        "the number of the paragraph that the abstract is from. The answer format must be like \"Paragraph "
        "1\", \"Paragraph 2\", etc.\n\nThe answer is: "
    ),
    "passage_retrieval_zh": (
        "以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n\n{context}\n\n下面是一个摘要\n\n{input}\n\n请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n\n答案是："
    ),
    "lcc": (
        "Please complete the code given below. \n{context}Next line of code:\n"
    ),
    "repobench-p": (
        "Please complete the code given below. \n{context}{input}Next line of code:\n"
    ),
}


def _with_question(prompt: str) -> str:
    """The official prompt with ``{question}`` for ``{input}``. Five prompts (gov_report, multi_news, vcsum,
    passage_count, lcc) have no ``{input}``: their records' input is empty, so ``{question}`` goes at the very end,
    where it adds nothing to the official text but satisfies the prompt set's placeholder check."""
    return prompt.replace("{input}", "{question}") if "{input}" in prompt else prompt + "{question}"


LONGBENCH = {task: _with_question(prompt) for task, prompt in _DATASET2PROMPT.items()}

# LongBench config/dataset2maxlen.json; ∞Bench eval_utils.py DATA_NAME_TO_MAX_NEW_TOKENS (passkey: 6).
MAX_NEW_TOKENS = {
    "narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64, "multifieldqa_zh": 64, "hotpotqa": 32, "2wikimqa": 32,
    "musique": 32, "dureader": 128, "gov_report": 512, "qmsum": 512, "multi_news": 512, "vcsum": 512, "trec": 64,
    "triviaqa": 32, "samsum": 128, "lsht": 64, "passage_count": 32, "passage_retrieval_en": 32,
    "passage_retrieval_zh": 32, "lcc": 64, "repobench-p": 64,
    "infbench_qa": 40, "infbench_mc": 40, "passkey": 6,
}

INFINITEBENCH = {
    "infbench_qa": "Read the book below and answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe very concise.",
    "infbench_mc": (
        "Read the book and answer the question.\n\n{context}\n\nQuestion: {question}\n\nOnly one of the following "
        "options is correct, tell me the answer using one single letter (A, B, C, or D). Don't say anything else.\n{options}"
    ),
    "passkey": (  # gpt4_templates["passkey"], word for word ("memorize them"); the Self-Route variants ask other questions
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you "
        "about the important information there.\n\n{context}\n\n{question}"
    ),
}

# Self-Route's RAG-and-Route prompts, Appendix C Table 9 ("Prompts for each dataset") word for word: its curly quotes,
# "as concisely" where LongBench has "asconcisely", its own EN.QA and EN.MC wording. The table prints each prompt as one
# paragraph; the line breaks are the benchmarks' layout. Qasper's "Question: input" (no braces) is the question's slot.
_PAPER_UNANSWERABLE = (
    "If the question cannot be answered based on the information in the article, write “unanswerable”."
)
_PASSAGES_QA = (  # HotpotQA, 2WikiMQA and MuSiQue share it, as in LongBench
    "Answer the question based on the given passages. Only give me the answer and do not output any other words. "
    "{unanswerable}\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given "
    "passages. Only give me the answer and do not output any other words. {unanswerable}\n\nQuestion: "
    "{question}\nAnswer:"
)
_SELF_ROUTE_PAPER = {
    "narrativeqa": (
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question as "
        "concisely as you can, using a single phrase if possible. Do not provide any explanation. {unanswerable}\n\n"
        "Story: {context}\n\nNow, answer the question based on the story as concisely as you can, using a single "
        "phrase if possible. Do not provide any explanation. {unanswerable}\n\nQuestion: {question}\n\nAnswer:"
    ),
    "qasper": (
        "You are given a scientific article and a question. Answer the question as concisely as you can, using a "
        "single phrase or sentence if possible. {unanswerable} If the question is a yes/no question, answer “yes”, "
        "“no”, or “unanswerable”. Do not provide any explanation.\n\nArticle: {context}\n\nAnswer the question "
        "based on the above article as concisely as you can, using a single phrase or sentence if possible. "
        "{unanswerable} If the question is a yes/no question, answer “yes”, “no”, or “unanswerable”. Do not provide "
        "any explanation.\n\nQuestion: {question}\n\nAnswer:"
    ),
    "multifieldqa_en": (
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on "
        "the above text, only give me the answer and do not output any other words. {unanswerable}\n\nQuestion: "
        "{question}\nAnswer:"
    ),
    "hotpotqa": _PASSAGES_QA,
    "2wikimqa": _PASSAGES_QA,
    "musique": _PASSAGES_QA,
    "qmsum": (
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one "
        "or more sentences. {unanswerable}\n\nTranscript:\n{context}\n\nNow, answer the query based on the above "
        "meeting transcript in one or more sentences. {unanswerable}\n\nQuery: {question}\nAnswer:"
    ),
    "infbench_qa": (
        "Read the book and answer the question. Be very concise in your answer. {unanswerable}\n\n{context}\n\n"
        "Question: {question}\n\nOnly give me the answer and do not output any other words. {unanswerable}\n\nAnswer:"
    ),
    "infbench_mc": (
        "Read the book and answer the question. {unanswerable}\n\n{context}\n\nQuestion: {question}\n{options}\n\n"
        "Only output the letter of the correct answer and do not output any other words. {unanswerable}\n\n"
        "The letter of the correct answer is"
    ),
}
SELF_ROUTE = {task: t.replace("{unanswerable}", _PAPER_UNANSWERABLE) for task, t in _SELF_ROUTE_PAPER.items()}

# For the tasks Table 9 does not give, the instruction goes where Table 9 puts it: after each instruction block.
_ANCHORS = ("Do not provide any explanation.", "do not output any other words.", "in one or more sentences.")


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
    lara = lara_prompts(item.task, base, with_unanswerable)
    if lara is not None:
        return lara, LARA_MAX_NEW_TOKENS
    template = LONGBENCH.get(item.task) or INFINITEBENCH.get(item.task)
    if template is None:
        return base, MAX_NEW_TOKENS.get(item.task)
    self_route = _with_options(SELF_ROUTE.get(item.task) or with_unanswerable(template), item)
    template = _with_options(template, item)
    return (
        replace(base, lc=template, rag=template, self_route=self_route, version=PROMPT_VERSION),
        MAX_NEW_TOKENS.get(item.task),
    )


def _with_options(template: str, item: EvalItem) -> str:
    """A multiple-choice template with the item's options, "A. ..." one a line (braces escaped: options are text)."""
    if "{options}" not in template:
        return template
    options = "\n".join(f"{OPTION_LETTERS[i]}. {o}" for i, o in enumerate(item.options))
    return template.replace("{options}", options.replace("{", "{{").replace("}", "}}"))
