"""Cost in money: price lookup, the arithmetic with cached prompt tokens, price files and their errors."""

from __future__ import annotations

import pytest

from lcrag.core.errors import LcragError
from lcrag.evaluation.prices import BUILT_IN, Price, PriceTable, calls_cost, model_key
from lcrag.core.types import LLMCall


def test_cached_prompt_tokens_are_billed_at_the_cached_price():
    price = Price(input=2.0, cached_input=0.5, output=8.0)
    # 1,000 prompt tokens of which 600 cached, 100 completion tokens
    assert price.cost(1000, 100, 600) == pytest.approx((400 * 2.0 + 600 * 0.5 + 100 * 8.0) / 1e6)
    assert price.cost(100, 0, 500) == pytest.approx(100 * 0.5 / 1e6)  # never more cached than prompt


def test_lookup_by_model_name_and_spec():
    table = PriceTable()
    assert model_key("openai:gpt-4o-mini@http://localhost:8000/v1") == "gpt-4o-mini"
    assert table.get("openai:gpt-4o@https://api.openai.com/v1") == BUILT_IN["gpt-4o"]
    assert table.get("SmolLM2-135M-Instruct.Q4_1") is None  # a local model is unpriced, not free


def test_calls_cost_sums_calls_and_is_none_when_unpriced():
    calls = [LLMCall("gpt-4o-mini", 2000, 10, stage="route"), LLMCall("gpt-4o-mini", 8000, 20, 7000, stage="answer")]
    expected = BUILT_IN["gpt-4o-mini"].cost(2000, 10) + BUILT_IN["gpt-4o-mini"].cost(8000, 20, 7000)
    assert calls_cost(calls, PriceTable()) == pytest.approx(expected)
    assert calls_cost([LLMCall("local", 10, 1, stage="answer")], PriceTable()) is None
    as_dicts = [{"model": "local", "prompt_tokens": 2000, "completion_tokens": 10, "cached_prompt_tokens": 0}]
    assert calls_cost(as_dicts, PriceTable(), price_as="gpt-4o") == pytest.approx(BUILT_IN["gpt-4o"].cost(2000, 10))


def test_a_prices_file_adds_models(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text('currency = "USD"\n[models."my-vllm"]\ninput = 0.2\noutput = 0.4\n')
    table = PriceTable.load(path)
    assert table.get("openai:my-vllm@http://gpu:8000/v1") == Price(0.2, 0.2, 0.4)  # cached defaults to input
    assert "gpt-4o" in table.prices
    yaml = tmp_path / "prices.yaml"
    yaml.write_text("models:\n  local:\n    input: 0\n    cached_input: 0\n    output: 0\n")
    assert PriceTable.load(yaml).get("local") == Price(0, 0, 0)


@pytest.mark.parametrize("text,message", [
    ('[models."m"]\ninput = -1\noutput = 1\n', "models.m.input: must be a number ≥ 0"),
    ('[models."m"]\ninput = 1\noutput = "x"\n', "models.m.output: must be a number ≥ 0"),
    ('[models."m"]\ninput = 1\noutput = 1\nwrite = 2\n', "models.m.write: unknown key"),
    ('[models."m"]\noutput = 1\n', "models.m.input: missing"),
    ('currency = "EUR"\n[models."m"]\ninput = 1\noutput = 1\n', "only USD"),
    ('[other]\nx = 1\n', "a prices file has a `models` table"),
    ('[models\n', "invalid TOML"),
])
def test_bad_price_files_are_one_line(tmp_path, text, message):
    path = tmp_path / "prices.toml"
    path.write_text(text)
    with pytest.raises(LcragError, match=message) as info:
        PriceTable.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_unknown_price_as_lists_the_known_models():
    with pytest.raises(LcragError, match="no price for 'gpt-9'; known: .*gpt-4o-mini"):
        PriceTable().require("gpt-9")


def test_the_report_prices_recorded_rows():
    from lcrag.evaluation.report import by_config

    rows = [{"dataset": "d", "config": "lc", "strategy": "lc", "score": 1.0, "prompt_tokens": 1000, "route": "lc",
             "calls": [{"model": "local", "prompt_tokens": 1000, "completion_tokens": 10, "cached_prompt_tokens": 900}]}]
    cost = lambda row: calls_cost(row["calls"], PriceTable(), "gpt-4o-mini")  # noqa: E731
    header, body = by_config(rows, cost)
    assert header[5] == "USD / 1K questions"
    assert body[0][5] == f"{1000 * BUILT_IN['gpt-4o-mini'].cost(1000, 10, 900):.3f}"
    assert by_config(rows, lambda row: None)[1][0][5] == "unpriced"
    assert "USD / 1K questions" not in by_config(rows)[0]  # unpriced reports keep their columns


@pytest.mark.parametrize("model,listed", [
    ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"), ("anthropic/claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
    ("openai:gpt-4o-2024-08-06@http://127.0.0.1:8000/v1", "gpt-4o"), ("gpt-4o-2024-05-13", "gpt-4o-2024-05-13"),
])
def test_a_dated_snapshot_is_priced_as_the_model_it_snapshots_unless_listed_itself(model, listed):
    table = PriceTable.load(None)
    assert table.get(model) == table.prices[listed]


def test_an_unknown_model_stays_unpriced():
    assert PriceTable.load(None).get("my-model-20241022") is None
