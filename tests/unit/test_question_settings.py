"""Each per-question setting is declared once (lcrag.core.question_settings): a setting added there is a flag of
``lcrag ask`` and ``eval``, a field of the service's request model with its bounds, a parameter of the MCP ask
tool, and part of the eval run identity; and every declared setting is a run-file key that reaches the question's
spec (nothing accepted and ignored)."""

from __future__ import annotations

import types
from dataclasses import fields

import pytest
import typer
from typer.testing import CliRunner
from pydantic import ValidationError

from lcrag.cli.ask import ask
from lcrag.cli.chat import chat
from lcrag.cli.evaluate import evaluate
from lcrag.cli.question_flags import question_flags
from lcrag.core.options import SettingError
from lcrag.core.question_settings import QUESTION_SETTINGS, QuestionSetting, by_name, identity_additions
from lcrag.pipeline.config import PER_QUESTION, SECTIONS, Config
from lcrag.pipeline.pipeline import Settings
from lcrag.pipeline.specs import resolve
from lcrag.service.mcp.tools import LcragMCP, with_choices
from lcrag.service.requests import question_choices_model

TEMPERATURE = QuestionSetting("temperature", float, 0.0, "sampling temperature", low=0, high=2)
WITH_TEMPERATURE = (*QUESTION_SETTINGS, TEMPERATURE)
# A value other than the default for each declared setting, over settings where a part reads it.
OTHER_VALUES = {
    "strategy": ({}, "rag"), "retriever": ({}, "dense"), "k": ({}, 3), "budget": ({}, 500),
    "order": ({}, "document"), "chunking": ({}, "words:50"), "max_tokens": ({}, 32),
    "window": ({"retriever": "sentence-window"}, 1), "tree_navigation": ({"retriever": "tree"}, "llm"),
    "unit": ({}, "passage"), "route_threshold": ({}, 0.4), "router": ({}, "lara"),
    "lc_share": ({"router": "lara"}, 0.5), "lc_cost_share": ({"router": "lara"}, 0.5), "cache_aware": ({}, True),
    "condense": ({}, "join"), "history_turns": ({}, 2),
}


def app_of(function) -> typer.Typer:
    app = typer.Typer()
    app.command()(function)
    app.command("other")(lambda: None)  # two commands: the app is a group, as lcrag's
    return app


def flags_of(function) -> dict[str, object]:
    """The click parameters of a typer command function, by name."""
    return {p.name: p for p in typer.main.get_command(app_of(function)).commands[function.__name__].params}


@pytest.mark.parametrize("command, name, arguments",
                         [(ask, "ask", ["doc.txt", "why?"]), (evaluate, "eval", []), (chat, "chat", ["doc.txt"])])
def test_a_setting_declared_once_is_a_flag_of_ask_eval_and_chat(command, name, arguments):
    with_temperature = question_flags(name, WITH_TEMPERATURE)(command.__wrapped__)
    assert flags_of(with_temperature)["temperature"].opts == ["--temperature"]
    assert "temperature" not in flags_of(command)
    assert ("condense" in flags_of(command)) == (name == "chat")  # a conversation's settings: chat's alone
    assert {"llm", "embedder", "base_url", "timeout", "server_slots"} <= set(flags_of(command))  # READER_FLAGS
    out = CliRunner().invoke(app_of(with_temperature), [command.__name__, *arguments, "--temperature", "3"])
    # Its bounds, checked before the command runs, by the declaration (lcrag's main says it in one line, exit 2).
    assert isinstance(out.exception, SettingError) and out.exception.setting == "temperature"
    assert "must be a number from 0 to 2, got 3.0" in str(out.exception)


def test_a_setting_declared_once_is_a_request_field_with_its_bounds():
    choices = question_choices_model(WITH_TEMPERATURE)
    assert choices.model_validate({"temperature": 1.5}).answer_options() == {"temperature": 1.5}
    with pytest.raises(ValidationError, match="temperature"):
        choices.model_validate({"temperature": 3.0})


def test_a_setting_declared_once_is_a_parameter_of_the_mcp_ask_tool():
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata

    plain = LcragMCP.ask.__code__
    copy = types.FunctionType(plain, LcragMCP.ask.__globals__, "ask", LcragMCP.ask.__defaults__)
    copy.__annotations__ = {k: v for k, v in LcragMCP.ask.__annotations__.items() if k not in by_name()}
    schema = func_metadata(with_choices(copy, WITH_TEMPERATURE), skip_names=["self", "ctx"]).arg_model
    temperature = schema.model_json_schema()["properties"]["temperature"]
    assert temperature["anyOf"][0] == {"type": "number"}
    assert (temperature["minimum"], temperature["maximum"]) == (0, 2)  # published; AskRequest checks them
    assert "temperature" not in func_metadata(LcragMCP.ask, skip_names=["self", "ctx"]).arg_model.model_fields


def test_a_setting_declared_once_is_in_the_eval_identity_when_set():
    recorded = {"configs": []}
    values = {s.name: s.default for s in QUESTION_SETTINGS} | {"temperature": 0.5}
    assert identity_additions(values, recorded, WITH_TEMPERATURE) == {"temperature": 0.5}
    assert identity_additions(values | {"temperature": 0.0}, recorded, WITH_TEMPERATURE) == {}


def test_every_declared_setting_is_a_run_file_key_and_every_per_question_key_is_declared():
    declared = by_name()
    assert set(declared) == set(PER_QUESTION) - {"options", "prompts"}
    for name, setting in declared.items():
        assert getattr(Settings(), name) == setting.default, name
    assert set(OTHER_VALUES) == set(declared)


def from_run_file(values: dict[str, object]) -> Settings:
    """The settings of a run file giving ``values``, each under the section that holds it."""
    tables: dict[str, dict[str, object]] = {}
    for name, value in values.items():
        section = next(s for s, cls in SECTIONS.items() if name in {f.name for f in fields(cls)})
        tables.setdefault(section, {})[name] = value
    return Config.from_dict(tables, source="run.toml").settings()


@pytest.mark.parametrize("name", sorted(OTHER_VALUES))
def test_every_declared_setting_is_a_run_file_key_that_reaches_the_question_spec(name):
    base, value = OTHER_VALUES[name]
    before, after = from_run_file(base), from_run_file(base | {name: value})
    assert getattr(after, name) == value
    strategy = "longrag" if name == "unit" else None  # the corpus unit: read by a corpus strategy
    assert resolve(after, strategy) != resolve(before, strategy), f"{name} is accepted and ignored"


def test_a_declared_settings_choices_are_those_its_part_takes():
    """The declaration sits below the parts (lcrag.core): the choices it states are the parts' own."""
    from lcrag.assembly.context import ORDERS
    from lcrag.retrieval.tree_index import NAVIGATIONS
    from lcrag.strategies.conversation import CONDENSE_MODES

    declared = by_name()
    assert set(declared["order"].choices) == set(ORDERS)
    assert set(declared["tree_navigation"].choices) == set(NAVIGATIONS)
    assert set(declared["condense"].choices) == set(CONDENSE_MODES)


def test_a_setting_declared_once_is_a_run_file_key_of_its_section():
    """declared_fields makes the run file's section class hold a declared setting: its type, default and bounds."""
    from dataclasses import dataclass

    from lcrag.core.question_settings import declared_fields

    @dataclass(frozen=True)
    @declared_fields("strategy", (TEMPERATURE,))
    class Section:
        pass

    assert Section().temperature == 0.0 and Section(temperature=1.5).temperature == 1.5
    field_of = {f.name: f for f in fields(Section)}
    assert field_of["temperature"].metadata["per_question"]
    assert set(by_name()) == {f.name for name in ("strategy", "retrieval", "chunking", "reader")
                              for f in fields(SECTIONS[name]) if f.metadata.get("per_question")}


def test_a_chat_keeps_only_the_history_its_follow_ups_read_and_goes_on_after_a_failed_question(monkeypatch):
    from types import SimpleNamespace

    from lcrag.cli import chat as chat_module
    from lcrag.core.errors import InputError

    seen = []

    def ask(document, question, history=()):
        seen.append([m["content"] for m in history])
        if question == "bad":
            raise InputError("the question is too long")
        return SimpleNamespace(text=f"re {question}", conversation=None, calls=[])

    monkeypatch.setattr("lcrag.cli.stream.show_answer", lambda *args: None)
    monkeypatch.setattr("lcrag.evaluation.prices.calls_cost", lambda *args: None)
    pipeline = SimpleNamespace(ask=ask, settings=Settings(history_turns=2))
    failed = chat_module._converse(pipeline, None, iter(["a", "bad", "b", "c"]), None, None, as_json=True)
    assert failed == 1
    assert seen == [[], ["a", "re a"], ["a", "re a"], ["b", "re b"]]
