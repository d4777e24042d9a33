"""Self-Route's decline probability from token log-probabilities, and the --route-threshold condition."""

from __future__ import annotations

import logging
import math

import pytest

from lcrag.core.errors import LcragError
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.readers.base import Completion, GenerationParams
from lcrag.readers.cache import CompletionCache
from lcrag.readers.openai_compat import _logprobs
from lcrag.strategies.declines import decline_probability
from lcrag.core.types import Document


def position(chosen, **candidates):
    return {"token": chosen, "top": [[t, math.log(p)] for t, p in candidates.items()]}


def test_first_token_mass_of_the_decline_counts():
    # "Un" and "un" start the decline; "The" and "I" do not
    logprobs = [position("The", The=0.7, Un=0.1, un=0.05, I=0.1)]
    assert decline_probability(logprobs) == pytest.approx(0.15)


def test_a_decline_spread_over_tokens_multiplies_along_the_path():
    logprobs = [position("Un", Un=0.6, The=0.3), position("answer", answer=0.9, known=0.1),
                position("able", able=1.0)]
    assert decline_probability(logprobs) == pytest.approx(0.54)


def test_leading_quotes_and_spaces_are_skipped():
    logprobs = [{"token": ' "', "top": [[' "', math.log(0.5)], ["Unanswerable", math.log(0.4)]]},
                position("unanswerable", unanswerable=0.8, Paris=0.2)]
    assert decline_probability(logprobs) == pytest.approx(0.4 + 0.5 * 0.8)


def test_no_logprobs_no_probability():
    assert decline_probability(None) is None and decline_probability([]) is None


def test_openai_style_logprobs_are_read():
    data = {"choices": [{"logprobs": {"content": [
        {"token": "Un", "logprob": -0.5, "top_logprobs": [{"token": "Un", "logprob": -0.5}, {"token": "The", "logprob": -1.0}]}]}}]}
    assert _logprobs(data) == [{"token": "Un", "top": [["Un", -0.5], ["The", -1.0]]}]
    assert _logprobs({"choices": [{"message": {}}]}) is None


def test_the_completion_cache_keeps_logprobs(tmp_path):
    cache = CompletionCache(tmp_path / "c.sqlite")
    cache.put("k", Completion("m", 3, 1, text="x", logprobs=[position("Un", Un=0.5)]))
    assert cache.get("k").logprobs == [{"token": "Un", "top": [["Un", math.log(0.5)]]}]


class DecliningReader:
    """Writes "The answer" but gives "Un" the probability ``p`` at the first position of Self-Route's step."""

    def __init__(self, scripted_reader, p, with_logprobs=True):
        self.inner = scripted_reader(lambda m: "The answer")
        self.model, self.context_window, self.tokenizer = "declining", 100_000, self.inner.tokenizer
        self.p, self.with_logprobs, self.params = p, with_logprobs, []

    def count_prompt_tokens(self, messages):
        return self.inner.count_prompt_tokens(messages)

    def complete(self, messages, params: GenerationParams):
        self.params.append(params)
        completion = self.inner.complete(messages, params)
        if params.top_logprobs and self.with_logprobs:
            completion.logprobs = [position("The", The=1 - self.p, Un=self.p)]
        return completion


@pytest.mark.parametrize("threshold,p,route", [(None, 0.3, "rag"), (0.2, 0.3, "lc"), (0.5, 0.3, "rag"),
                                               (0.0, 1e-9, "lc"), (1.0, 0.999, "rag")])
def test_the_threshold_decides_the_route(scripted_reader, threshold, p, route):
    reader = DecliningReader(scripted_reader, p)
    pipeline = Pipeline(Settings(cache=False, route_threshold=threshold), reader=reader)
    answer = pipeline.ask(Document("The sky is green. " * 50), "What colour is the sky?")
    assert answer.route == route
    assert answer.decline_probability == pytest.approx(p)
    assert reader.params[0].top_logprobs == 20  # Self-Route's step asks for the probabilities
    assert all(not p.top_logprobs for p in reader.params[1:])  # LC does not


def test_a_reader_without_logprobs_falls_back_to_the_text_said_once(scripted_reader, caplog):
    reader = DecliningReader(scripted_reader, 0.9, with_logprobs=False)
    pipeline = Pipeline(Settings(cache=False, route_threshold=0.1), reader=reader)
    with caplog.at_level(logging.WARNING):
        for question in ("What colour is the sky?", "Is the sky green?"):
            assert pipeline.ask(Document("The sky is green."), question).route == "rag"
    assert sum("no token probabilities" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize("value", [-0.1, 1.5, "high"])
def test_a_threshold_outside_0_1_is_refused(value):
    with pytest.raises(LcragError, match="route_threshold must be a number from 0 to 1"):
        Settings(route_threshold=value)


class StepReader(DecliningReader):
    """Declines (by probability) while the context is short: the wider step finds more and answers."""

    def complete(self, messages, params: GenerationParams):
        self.params.append(params)
        completion = self.inner.complete(messages, params)
        chunks = messages[-1]["content"].count("[Chunk ")
        if params.top_logprobs:
            p = self.p if chunks < 4 else 0.01
            completion.logprobs = [position("The", The=1 - p, Un=p)]
        return completion


@pytest.mark.parametrize("p,route,stages", [(0.01, "rag", ["route"]), (0.6, "rag-wide", ["route", "route-wide"])])
def test_the_cascade_widens_before_it_reads_everything(scripted_reader, p, route, stages):
    reader = StepReader(scripted_reader, p)
    pipeline = Pipeline(Settings(cache=False, route_threshold=0.5, k=2, chunking="words:5", strategy="cascade"),
                        reader=reader)
    answer = pipeline.ask(Document(" ".join(f"word{i}" for i in range(200))), "word3 word7 word11 word15?")
    assert answer.route == route and [c.stage for c in answer.calls] == stages


def test_the_cascade_ends_in_lc(scripted_reader):
    reader = DecliningReader(scripted_reader, 0.9)
    pipeline = Pipeline(Settings(cache=False, route_threshold=0.5, k=2, strategy="cascade"), reader=reader)
    answer = pipeline.ask(Document("The sky is green. " * 100), "What colour is the sky?")
    assert answer.route == "lc" and [c.stage for c in answer.calls] == ["route", "route-wide", "answer"]


def write_router(path, coef_decline, feature="decline_probability", intercept=0.0):
    """A router whose only weight is on one feature (the decline probability): P(LC better) rises with it."""
    from lcrag.strategies.routing.learned import FEATURES, Router

    coef = [coef_decline if f == feature else 0.0 for f in FEATURES]
    Router((0.0,) * len(FEATURES), (1.0,) * len(FEATURES), tuple(coef), intercept,
           tuple(sorted(0.1 * i for i in range(1, 10))), {"questions": 9}).save(path)
    return path


@pytest.mark.parametrize("p,share,route", [(0.9, None, "lc"), (0.1, None, "lc"), (0.1, 0.05, "rag")])
def test_a_learned_router_decides_self_route(scripted_reader, tmp_path, p, share, route):
    router = write_router(tmp_path / "router.json", coef_decline=4.0)  # P(LC better) = sigmoid(4 p): >= 0.5 always
    reader = DecliningReader(scripted_reader, p)
    # share 0.05 of the fitting questions: only those at P >= 0.9 (the top of the calibration) go to LC
    pipeline = Pipeline(Settings(cache=False, router=str(router), lc_share=share), reader=reader)
    answer = pipeline.ask(Document("The sky is green. " * 20), "What colour is the sky?")
    assert answer.route == route


@pytest.mark.parametrize("said,share,declined", [
    ("The text does not say what colour the sky is.", 0.3, True), ("Unanswerable", None, True),
    ("The sky is green. The text does not say why.", 0.3, False), ("The sky is green.", None, False)])
def test_declines_to_lc_sends_a_declining_rag_answer_to_lc_whatever_its_score(scripted_reader, tmp_path, said, share,
                                                                              declined):
    """`--option declines_to_lc=true`: Self-Route's written rule on top of a router. A RAG answer whose first
    sentence declines goes to LC though the router scores it low, and a held share counts it; a caveat after an
    answer is not a decline. Without the option the router alone decides (RAG here)."""
    router = write_router(tmp_path / "router.json", 0.0, intercept=-6.0)  # P(LC better) 0.002: under any threshold
    document = Document("The sky is green. " * 20)
    routes = {}
    for option in (False, True):
        settings = Settings(cache=False, cache_dir=tmp_path / "cache", router=str(router), lc_share=share,
                            route_threshold=None if share else 0.5, options={"declines_to_lc": option})
        answer = Pipeline(settings, reader=scripted_reader(lambda m: said)).ask(document, "What colour is the sky?")
        routes[option] = answer.route
        if share and option:  # one ledger: the question routed without the option is another question's route
            assert answer.routing.get("declined", False) is declined and "repeated" not in answer.routing
            assert answer.routing["realized_lc_share"] == pytest.approx(0.5 if declined else 0.0, abs=0.01)  # counted
    assert routes == {False: "rag", True: "lc" if declined else "rag"}


@pytest.mark.parametrize("said,route", [("It fell to 41.5 in 2021.", "rag"), ("It fell to 39.0 in 2021.", "lc")])
def test_the_rag_answers_grounding_is_measured_live(scripted_reader, tmp_path, said, route):
    """A figure the RAG answer gives that the retrieved text never wrote: the router's grounding signal, measured
    on the live answer as `lcrag eval` measures it on rows (a router weighing only that signal routes on it)."""
    # P(LC better) = sigmoid(6 - 8 x): 0.12 when every figure is in the chunks, 0.88 when half of them are
    router = write_router(tmp_path / "router.json", -8.0, "answer_numbers_in_chunks", intercept=6.0)
    pipeline = Pipeline(Settings(cache=False, router=str(router), route_threshold=0.5),
                        reader=scripted_reader(lambda m: said))
    document = Document("Filler about the river and its boats. " * 30 + "The index fell to 41.5 in 2021. " +
                        "More filler about the harbour. " * 30)
    assert pipeline.ask(document, "What did the index fall to in 2021?").route == route


def test_a_router_holds_its_lc_share_per_reader_across_pipelines(scripted_reader, tmp_path):
    router = write_router(tmp_path / "router.json", coef_decline=4.0)
    reader = DecliningReader(scripted_reader, 0.0)
    ps = [0.02 + 0.048 * (i % 20) for i in range(40)]  # the router's scores spread over the questions
    routes, routing = [], []
    for half in (ps[:20], ps[20:]):  # two pipelines on one cache: two `lcrag ask` processes
        pipeline = Pipeline(Settings(cache=False, cache_dir=tmp_path / "cache", router=str(router), lc_share=0.25),
                            reader=reader)
        for p in half:
            reader.p = p
            question = f"What colour is the sky? (question {len(routes) + 1})"  # 40 questions: none asked again
            answer = pipeline.ask(Document("The sky is green. " * 20), question)
            routes.append(answer.route)
            routing.append(answer.routing)
    # The calibration's threshold for 25% (0.9 of its fitting scores 0.1-0.9) sends 40% of these questions (scores
    # sigmoid(4p), 0.52-0.98): held at run time, the share comes near 25% even within the first questions.
    static = sum(1 / (1 + math.exp(-4 * p)) >= 0.9 for p in ps) / len(ps)
    assert static == pytest.approx(0.4) and abs(routes.count("lc") / len(routes) - 0.25) <= 0.1
    assert routing[-1]["questions"] == 40 and routing[-1]["lc_share"] == 0.25
    assert routing[-1]["realized_lc_share"] == pytest.approx(routes.count("lc") / 40, abs=0.02)


def test_a_fixed_threshold_is_not_held(scripted_reader, tmp_path):
    router = write_router(tmp_path / "router.json", coef_decline=4.0)
    pipeline = Pipeline(Settings(cache=False, cache_dir=tmp_path, router=str(router), route_threshold=0.5),
                        reader=DecliningReader(scripted_reader, 0.1))
    answer = pipeline.ask(Document("The sky is green. " * 20), "What colour is the sky?")
    assert answer.route == "lc" and answer.routing is None


def test_router_settings_are_checked(tmp_path):
    with pytest.raises(LcragError, match="lc_share needs a router"):
        Settings(lc_share=0.3)
    with pytest.raises(LcragError, match="lc_cost_share needs a router"):
        Settings(lc_cost_share=0.3)
    router = write_router(tmp_path / "router.json", coef_decline=4.0)
    with pytest.raises(LcragError, match="lc_cost_share cannot be set with lc_share as well"):
        Settings(router=str(router), lc_share=0.3, lc_cost_share=0.4)
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(LcragError, match="not a router file"):
        Settings(router=str(tmp_path / "bad.json"))


class CachingReader(DecliningReader):
    """Reports a prefix cache as llama.cpp does: an LC prompt after an LC prompt reuses all but its last 40 tokens."""

    def complete(self, messages, params: GenerationParams):
        completion = super().complete(messages, params)
        is_lc = not params.top_logprobs
        if is_lc and getattr(self, "lc_before", False):
            completion.cached_prompt_tokens = completion.prompt_tokens - 40
        self.lc_before = self.lc_before or is_lc if hasattr(self, "lc_before") else is_lc
        return completion


def test_cache_aware_self_route_goes_straight_to_lc_once_the_document_is_read(scripted_reader):
    reader = CachingReader(scripted_reader, 0.9)  # declines: the first question goes RAG -> LC
    # RAG reads 2 chunks of 150 words (~300 uncached tokens); LC on the cached document processes ~128
    pipeline = Pipeline(Settings(cache=False, route_threshold=0.5, cache_aware=True, k=2, chunking="words:150"),
                        reader=reader)
    document = Document(" ".join(f"word{i}" for i in range(2000)))
    first = pipeline.ask(document, "What is word7?")
    assert first.route == "lc" and [c.stage for c in first.calls] == ["route", "answer"]
    second = pipeline.ask(document, "What is word9?")
    assert second.route == "lc" and [c.stage for c in second.calls] == ["answer"]  # no RAG step: LC is warm
    other = pipeline.ask(Document("The sky is green. " * 50), "What colour is the sky?")
    assert [c.stage for c in other.calls][0] == "route"  # another document: not read yet


def test_without_cache_awareness_every_question_runs_rag_first(scripted_reader):
    reader = CachingReader(scripted_reader, 0.9)
    pipeline = Pipeline(Settings(cache=False, route_threshold=0.5, k=2, chunking="words:50"), reader=reader)
    document = Document(" ".join(f"word{i}" for i in range(2000)))
    for question in ("What is word7?", "What is word9?"):
        assert [c.stage for c in pipeline.ask(document, question).calls] == ["route", "answer"]
