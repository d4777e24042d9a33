"""The request bodies the service accepts, declared once with their types and bounds: FastAPI turns a wrong one into
a 422 naming the field (never a 500 from a value used before it was checked) and lists them in the OpenAPI schema.

Types are strict (``"stream": "false"`` is refused, not read as true). The native ``/v1/ask`` refuses unknown fields;
the chat body ignores them, as OpenAI clients send many (temperature, user, …) that mean nothing here. Limits an
operator sets per server (question length, max_tokens, strategies) are checked after parsing, in
:class:`lcrag.service.limits.Limits`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from lcrag.core.errors import InputError
from lcrag.core.question_settings import QUESTION_SETTINGS, QuestionSetting, request_fields

# Bounds on the values themselves; a Settings check after them gives the valid range in its own words.
Name = Annotated[str, Field(min_length=1, max_length=64)]
Short = Annotated[str, Field(min_length=1, max_length=200)]
OptionValue = Annotated[str, Field(max_length=1000)] | int | float | bool | None


class _ChoicesBase(BaseModel):
    """What every question's request takes besides the declared settings: the parts' options."""

    model_config = ConfigDict(extra="forbid", strict=True)
    choice_names: ClassVar[frozenset[str]] = frozenset()  # the fields of the model made from the declaration

    options: dict[Short, OptionValue] | None = Field(
        None, max_length=32, description="options the strategy or retriever declares, by name (e.g. widen for cascade)")

    def answer_options(self) -> dict[str, Any]:
        """The options the client gave, by Settings field name."""
        return self.model_dump(include=set(self.choice_names), exclude_none=True)


def question_choices_model(declared: Iterable[QuestionSetting] = QUESTION_SETTINGS) -> type[_ChoicesBase]:
    """How a question is answered: the declared per-question settings a client may choose
    (:mod:`lcrag.core.question_settings`), each with its bounds, and the parts' options."""
    fields = {name: (kind, None) for name, kind in request_fields(declared).items()}
    model = create_model("QuestionChoices", __base__=_ChoicesBase, __module__=__name__, **fields)
    model.choice_names = frozenset(model.model_fields)
    return model


QuestionChoices = question_choices_model()


class AskRequest(QuestionChoices):
    collection: Name
    question: str
    stream: bool = False
    history: list[Turn] = Field(default_factory=list, max_length=10_000, description=(
        "the conversation the question follows, oldest first (role: user, assistant or system)"))

    def conversation(self) -> list[dict[str, str]]:
        return conversation(self.history)


class NewCollection(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(max_length=200)  # the name's own rules are checked by Collections, with their message


class ContentPart(BaseModel):
    """One part of an OpenAI message's content: text, or another kind (image_url, …) that a text reader refuses."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: Short
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]  # OpenAI's roles; others: 422
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text: a string, or its text parts joined (OpenAI clients may send either)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        others = sorted({p.type for p in self.content if p.type != "text"})
        if others:
            raise InputError(f"messages: only text content is read, not {', '.join(o[:40] for o in others)}")
        return "\n".join(p.text or "" for p in self.content)


class Turn(Message):
    """A message of the conversation a native question follows."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "user", "assistant"]
    content: str | list[ContentPart]  # a turn of the native API says something (chat's tool-call turns may not)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool = False


class ChatRequest(QuestionChoices):
    model_config = ConfigDict(extra="ignore", strict=True)

    model: Short
    messages: list[Message] = Field(min_length=1, max_length=10_000)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_completion_tokens: int | None = Field(None, ge=1, description="OpenAI's newer name for max_tokens")

    def question(self) -> str:
        """The last user message's text: what is asked."""
        last = self._last_user()
        if last is None or not self.messages[last].text().strip():
            raise InputError("messages: the last user message must have text content")
        return self.messages[last].text()

    def conversation(self) -> list[dict[str, str]]:
        """The messages before the question: the conversation it follows."""
        return conversation(self.messages[:self._last_user() or 0])

    def _last_user(self) -> int | None:
        users = [i for i, m in enumerate(self.messages) if m.role == "user"]
        return users[-1] if users else None

    def answer_options(self) -> dict[str, Any]:
        given = super().answer_options()
        if self.max_completion_tokens is not None:
            given.setdefault("max_tokens", self.max_completion_tokens)
        return given



def conversation(messages: list[Message]) -> list[dict[str, str]]:
    """Messages as the turns of a conversation: OpenAI's "developer" is its system message; tool and function
    results are left out (they are not the conversation's text)."""
    roles = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
    return [{"role": roles[m.role], "content": m.text()} for m in messages if m.role in roles]
