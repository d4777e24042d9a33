"""What the service reads as a question's conversation: in chat, the messages before the last user message (system and
developer as system, tool results left out); in /v1/ask, `history` with its roles checked."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lcrag.service.requests import AskRequest, ChatRequest


def test_chat_messages_before_the_last_user_message_are_the_conversation():
    chat = ChatRequest.model_validate({"model": "lcrag/x", "messages": [
        {"role": "developer", "content": "Answer from the manual."},
        {"role": "user", "content": "What does fit do?"},
        {"role": "assistant", "content": [{"type": "text", "text": "It trains a model."}]},
        {"role": "tool", "content": "ignored"},
        {"role": "user", "content": "Which algorithm does it use?"},
        {"role": "assistant", "content": "a prefill after the question"}]})
    assert chat.question() == "Which algorithm does it use?"
    assert chat.conversation() == [{"role": "system", "content": "Answer from the manual."},
                                   {"role": "user", "content": "What does fit do?"},
                                   {"role": "assistant", "content": "It trains a model."}]


def test_a_chat_message_with_a_role_openai_does_not_have_is_refused():
    with pytest.raises(ValidationError, match="messages.0.role"):
        ChatRequest.model_validate({"model": "lcrag/x", "messages": [{"role": "wizard", "content": "x"},
                                                                     {"role": "user", "content": "Hi?"}]})
    for bad in ([{"role": "user"}], [{"role": "user", "content": None}]):  # a native turn says something
        with pytest.raises(ValidationError, match="history.0.content"):
            AskRequest.model_validate({"collection": "c", "question": "Which?", "history": bad})


def test_a_single_message_has_no_conversation():
    chat = ChatRequest.model_validate({"model": "lcrag/x", "messages": [{"role": "user", "content": "Hi?"}]})
    assert chat.conversation() == []


def test_native_history_is_checked_by_role_and_shape():
    ask = AskRequest.model_validate({"collection": "c", "question": "Which?", "history": [
        {"role": "user", "content": "What does fit do?"}, {"role": "assistant", "content": "Trains."}]})
    assert [m["role"] for m in ask.conversation()] == ["user", "assistant"]
    for bad in ([{"role": "tool", "content": "x"}], [{"role": "user", "content": "x", "name": "n"}], "not a list"):
        with pytest.raises(ValidationError):
            AskRequest.model_validate({"collection": "c", "question": "Which?", "history": bad})
