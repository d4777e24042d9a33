"""The offline free-form scorer: its features, the shipped calibration, and the metrics it registers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lcrag.core.errors import InputError
from lcrag.evaluation.datasets import EvalItem
from lcrag.evaluation.freeform import FEATURES, Calibration, FreeformScorer, answer_features, number_recall, numbers
from lcrag.evaluation.metrics import METRICS
from lcrag.core.text import declines, declines_first, hedges


class BagOfWordsEmbedder:
    """A unit-test embedder: normalised word counts over a fixed vocabulary (the real one is MiniLM)."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def embed(self, texts):
        rows = []
        for text in texts:
            v = np.zeros(64)
            for w in text.lower().split():
                v[self.vocab.setdefault(w.strip(".,"), len(self.vocab)) % 64] += 1
            rows.append(v / max(np.linalg.norm(v), 1e-9))
        return np.array(rows)


def test_numbers_read_scales_and_separators():
    assert numbers("$36.6 million and 1,234 or 12.5%") == [36.6e6, 1234.0, 12.5]
    assert number_recall("It was $36,639,000 in 2022.", "About $36.6 million in 2022") == 1.0
    assert number_recall("It was $36,639,000 in 2022.", "About $12 million in 1990") == 0.0
    assert number_recall("Canasta.", "Canasta") is None


@pytest.mark.parametrize("answer, expected", [
    ("The name of the tavern is not mentioned in the provided chunks.", True),
    ("The chunks provided do not mention a horse.", True),
    ("None mentioned.", True),
    ("Unanswerable", True),
    ("Miles tried to play Canasta with Atkins.", False),
])
def test_declines_in_the_readers_own_words(answer, expected):
    assert declines(answer) is expected


def test_a_caveat_at_the_end_is_not_a_decline_first():
    answer = "Paris hosted it. The text does not mention the year."
    assert declines(answer) and not declines_first(answer)
    assert hedges("It is not explicitly stated.") and not hedges("Bob.")


def test_features_reward_the_gold_content_and_not_the_question_words():
    good = answer_features("What game did Miles play?", "Canasta.", "Miles played Canasta.", 0.9)
    bad = answer_features("What game did Miles play?", "Canasta.", "Miles played a game.", 0.3)
    named_good, named_bad = dict(zip(FEATURES, good)), dict(zip(FEATURES, bad))
    assert len(good) == len(FEATURES)
    assert named_good["new_gold_recall"] == 1.0 and named_bad["new_gold_recall"] == 0.0


def test_the_shipped_calibration_loads_and_orders_answers():
    calibration = Calibration.bundled()
    assert set(calibration.bias) == {"location", "reasoning", "comp", "hallu"}
    scorer = FreeformScorer(calibration, BagOfWordsEmbedder())
    q, gold = "What did Miles try to play with Atkins?", "Canasta."
    right = scorer.score(q, gold, "Miles tried to play Canasta with Atkins.", "location")
    wrong = scorer.score(q, gold, "Miles tried to play chess with Atkins.", "location")
    assert 0.0 <= wrong < right <= 1.0
    absent_q, absent_gold = "What was the horse's name?", "The text does not mention a horse."
    declined = scorer.score(absent_q, absent_gold, "The text does not mention any horse.", "hallu")
    invented = scorer.score(absent_q, absent_gold, "The horse was called Thunder.", "hallu")
    assert declined > invented
    assert scorer.score(q, gold, None, "location") == 0.0  # a failed recording scores 0, as the judge saw False


def test_the_metrics_read_the_item_task():
    item = EvalItem("x/1", "lara-32k", "What was the horse's name?", ["The text does not mention a horse."], "doc",
                    metric="lara_hallu", meta={"task": "hallu"})
    metric = METRICS["lara_hallu"]
    assert metric.needs_item
    scorer = metric.score.__self__
    scorer._embedder = BagOfWordsEmbedder()  # the unit test does not load MiniLM
    assert metric.score_item("The text does not mention a horse.", item) > metric.score_item("Thunder.", item)


def test_a_damaged_calibration_is_one_clear_error(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"format": "lcrag-freeform-calibration", "features": ["x"]}))
    with pytest.raises(InputError, match="not a free-form scorer calibration"):
        Calibration.load(bad)
    (tmp_path / "d.json").write_text("{")
    with pytest.raises(InputError, match="not a calibration file"):
        Calibration.load(tmp_path / "d.json")
