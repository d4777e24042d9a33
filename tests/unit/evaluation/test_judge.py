"""LaRA's judge: its prompts verbatim, the verdict rule, caching, and questions it gives no verdict on."""

from __future__ import annotations

import pytest

from lcrag.evaluation.judge import ABSENT_PROMPT, ANSWER_PROMPT, SYSTEM, Judge, judge_messages, verdict
from lcrag.evaluation.routing.report import Question, judge_questions
from lcrag.readers import CachedReader, Completion, CompletionCache

# LaRA evaluation/compute_score_llm.py (Alibaba-NLP/LaRA@c171553), get_score_one_llm, the non-hallu prompt.
UPSTREAM_ANSWER = (
    "I will provide you with a question and its groundtruth answer, as well as an answer from an AI assistant. You "
    "need to judge whether the AI assistant's answer is correct based on the groundtruth answer. If it is correct, "
    "you should only output True; if it is incorrect, only output False.\n\n[Query] {query}\n\n[Groundtruth Answer] "
    "{label}\n\n[AI Assistant's Answer] {pred}\n\nNow, start your judgment:")


class ScriptedJudge:
    """A unit-test reader answering from a script keyed by the answer being judged; counts its calls."""

    model = "scripted"
    context_window = 4096
    tokenizer = None

    def __init__(self, replies):
        self.replies, self.calls = replies, 0

    def complete(self, messages, params):
        self.calls += 1
        answer = messages[-1]["content"].split("[AI Assistant's Answer] ")[1].split("\n")[0]
        return Completion(self.model, 10, 1, text=self.replies[answer])

    def count_prompt_tokens(self, messages):
        return 10


def test_prompts_are_laras_own():
    assert ANSWER_PROMPT == UPSTREAM_ANSWER
    assert ABSENT_PROMPT.startswith("You need to help me determine whether an AI model is hallucinating.")
    assert ABSENT_PROMPT.endswith("Now, start your judgement:")  # upstream spells the two endings differently
    messages = judge_messages("Q {x}?", "G", "A", absent=False)
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert "[Query] Q {x}?" in messages[1]["content"]  # braces in questions survive


@pytest.mark.parametrize("reply, expected", [("True", 1.0), ("False.", 0.0), ("**true**", 1.0), ("Maybe", None),
                                             ("", None)])
def test_verdicts(reply, expected):
    assert verdict(reply) == expected


def test_verdicts_are_cached_and_no_verdict_is_reported(tmp_path):
    reader = ScriptedJudge({"Paris": "True", "Lyon": "False", "Nice": "I cannot tell"})
    judge = Judge(CachedReader(reader, CompletionCache(tmp_path / "judge.sqlite")))
    assert judge.score("Capital?", ["Paris"], "Paris", absent=False)[0] == 1.0
    assert judge.score("Capital?", ["Paris"], "Paris", absent=False)[0] == 1.0
    assert reader.calls == 1  # the second verdict came from the cache

    def question(item, lc, rag):
        return Question("run", item, "d", 0.5, 0.5, 100, 10, [], None, False,
                        texts={"question": "Capital?", "answers": ["Paris"], "metric": "lara", "lc": lc, "rag": rag})

    kept, skipped = judge_questions([question("a", "Paris", "Lyon"), question("b", "Paris", "Nice")], judge)
    assert [(q.item_id, q.lc_score, q.rag_score) for q in kept] == [("a", 1.0, 0.0)]
    assert len(skipped) == 1 and "item b" in skipped[0] and "I cannot tell" in skipped[0]
