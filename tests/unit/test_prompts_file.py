"""Defect 3 (issue 14): a --prompts file is validated when read, never at format time."""

import json
import os
import signal

import pytest

from lcrag.core.errors import InputError
from lcrag.strategies import PromptSet


def write(tmp_path, content) -> str:
    path = tmp_path / "prompts.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


@pytest.mark.parametrize(
    "content, message",
    [
        ({"lc": 5}, "prompt 'lc' must be a string, not int"),  # was a TypeError traceback at format time
        ({"version": ["v2"]}, "prompt 'version' must be a string, not list"),
        ({"lc": "{context:{question}} {question}"}, r"write \{context\} without a format spec or conversion"),  # ValueError
        ({"lc": "{context:>999999999} {question}"}, r"found \{context:>999999999\}"),  # was a MemoryError
        ({"rag": "{context!r} {question}"}, r"found \{context!r\}"),
        ({"closed_book": "{question} {context}"}, r"'closed_book' may use only the placeholders \{question\}, not \{context\}"),
        ({"self_route": "{context}"}, r"must use the placeholders \{context\} and \{question\} \(missing \{question\}\)"),
        ({"lc": "{context} {question} }"}, r"not a valid template .*write literal braces as \{\{ and \}\}"),
        ({"sytem": "Be brief.", "lc": "x"}, r"unknown key\(s\) 'sytem'; the keys are lc, rag, self_route"),  # was ignored
        (["lc"], "must be a JSON object"),
        ("{oops", r"invalid JSON \(Expecting property name enclosed in double quotes at line 1 column 2\)"),
    ],
)
def test_bad_prompts_file_names_the_file_and_the_fault(tmp_path, content, message):
    path = write(tmp_path, content)
    with pytest.raises(InputError, match=message) as caught:
        PromptSet.from_file(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_valid_prompts_file_replaces_only_its_keys(tmp_path):
    path = write(tmp_path, {"closed_book": "Q: {question} {{literal}}", "system": "Be brief {not a template}."})
    prompts = PromptSet.from_file(path)
    assert prompts.lc == PromptSet().lc
    assert prompts.messages(prompts.closed_book, "why?") == [
        {"role": "system", "content": "Be brief {not a template}."},
        {"role": "user", "content": "Q: why? {literal}"},
    ]


def test_prompts_file_must_be_a_regular_file(tmp_path):
    fifo = tmp_path / "prompts.json"
    os.mkfifo(fifo)  # nobody writes: opening it for reading would block forever
    signal.alarm(30)  # a regression fails (SIGALRM ends the run) instead of hanging it
    try:
        with pytest.raises(InputError, match="prompts.json is not a regular file"):
            PromptSet.from_file(fifo)
    finally:
        signal.alarm(0)


def test_templates_are_checked_in_the_python_api_too():
    with pytest.raises(InputError, match="format spec"):
        PromptSet(rag="{context:>99} {question}")
