"""LaRA's LLM judge with any OpenAI-compatible model (``--judge MODEL``), its verdicts cached like every call.

The two prompts and the system message are LaRA's (Alibaba-NLP/LaRA@c171553 ``evaluation/compute_score_llm.py``),
verbatim: one for the hallucination task (the right answer says the document does not hold it), one for the
others. Upstream counts a reply containing "true" as correct and anything else as wrong; here a reply that says
neither True nor False is no verdict (None), reported and skipped by the caller, never a silent zero.
"""

from __future__ import annotations

from pathlib import Path

from lcrag.readers import CachedReader, CompletionCache, GenerationParams, Message, Reader, make_reader

SYSTEM = "You are a discriminator that judges whether the predictions to questions are correct."

ABSENT_PROMPT = """You need to help me determine whether an AI model is hallucinating. I will provide you with a question, a ground truth answer, and a prediction from the model. If the prediction from the model and the ground truth answer are basically consistent, and it is determined that this question is not mentioned in the text, then the model is deemed not to be hallucinating and the answer is considered correct. If it is correct, you should only output True; if it is incorrect, only output False.

[Query] {query}

[Groundtruth Answer] {label}

[AI Assistant's Answer] {pred}

Now, start your judgement:"""

ANSWER_PROMPT = """I will provide you with a question and its groundtruth answer, as well as an answer from an AI assistant. You need to judge whether the AI assistant's answer is correct based on the groundtruth answer. If it is correct, you should only output True; if it is incorrect, only output False.

[Query] {query}

[Groundtruth Answer] {label}

[AI Assistant's Answer] {pred}

Now, start your judgment:"""


def judge_messages(question: str, gold: str, answer: str, absent: bool) -> list[Message]:
    """LaRA's judge request for one answer (``absent``: the hallucination prompt)."""
    # str.replace, not format: questions and answers hold braces.
    prompt = (ABSENT_PROMPT if absent else ANSWER_PROMPT).replace("{query}", question).replace(
        "{label}", gold).replace("{pred}", answer)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]


def verdict(reply: str) -> float | None:
    """1.0 for True, 0.0 for False (upstream's rule: "true" anywhere wins), None for a reply that says neither."""
    text = reply.lower()
    if "true" in text:
        return 1.0
    return 0.0 if "false" in text else None


class Judge:
    """Asks a reader LaRA's judge question; the reader's completion cache keeps every verdict."""

    def __init__(self, reader: Reader):
        self.reader = reader
        self.params = GenerationParams(max_tokens=16, temperature=0.0)

    @classmethod
    def open(cls, model: str, cache_dir: Path, base_url: str | None = None, api_key: str | None = None) -> Judge:
        """``model`` on an OpenAI-compatible server (``openai:`` is implied), its verdicts cached in ``cache_dir``."""
        spec = model if ":" in model and not model.startswith("http") else f"openai:{model}"
        reader = make_reader(spec, base_url=base_url, api_key=api_key)
        cache_dir.mkdir(parents=True, exist_ok=True)
        return cls(CachedReader(reader, CompletionCache(cache_dir / "judge.sqlite")))

    def reply(self, question: str, gold: str, answer: str | None, absent: bool) -> str:
        # A failed recording reached LaRA's judge as Python's False: it is judged as that text, as upstream did.
        messages = judge_messages(question, gold, answer if isinstance(answer, str) else "False", absent)
        return self.reader.complete(messages, self.params).text

    def score(self, question: str, golds: list[str], answer: str | None, absent: bool) -> tuple[float | None, str]:
        """The best verdict over the gold answers, and the last reply (to quote when there is no verdict)."""
        best, reply = None, ""
        for gold in golds:
            reply = self.reply(question, gold, answer, absent)
            value = verdict(reply)
            if value is not None:
                best = value if best is None else max(best, value)
        return best, reply


__all__ = ["ABSENT_PROMPT", "ANSWER_PROMPT", "SYSTEM", "Judge", "judge_messages", "verdict"]
