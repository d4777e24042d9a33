"""lcrag for agents: a Model Context Protocol server (the official ``mcp`` SDK, 1.x or 2.x) over the same collections
and answering engine as ``lcrag serve`` — a collection made in one is answered by the other.

Tools: ``list_collections``; ``ask`` (a routed answer with its route, cost, usage and sources, as structured content;
the same options and limits as ``POST /v1/ask``, conversation included); ``search`` (the top passages with file, page,
section and a quote as ``snippet``, no reader call). Resources: each collection's files, as the text lcrag extracted
from them (``lcrag://collections/NAME/files/FILE``). A bad argument is a tool error with a one-line message; the server
goes on. Over streamable HTTP the service's guard stands in front (Host names, the API key and the people's keys of
``lcrag keys``, no cross-site writes), and a key with collection patterns sees only its collections in every tool and
resource (another is an unknown collection to it); over stdio the caller is the local user, who sees every one.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote

from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import Resource
from pydantic import BaseModel, ValidationError

try:  # the SDK 2.x: FastMCP renamed MCPServer; the HTTP settings moved to its HTTP app; template values come decoded
    from mcp.server.mcpserver import Context, MCPServer as SDKServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    SDK_MAJOR = 2
except ImportError:  # 1.x (1.10 or newer: structured output, transport security)
    from mcp.server.fastmcp import Context, FastMCP as SDKServer
    from mcp.server.fastmcp.exceptions import ResourceError, ToolError
    SDK_MAJOR = 1

from lcrag.core.errors import LcragError
from lcrag.core.question_settings import QUESTION_SETTINGS, QuestionSetting, request_fields
from lcrag.readers import streaming
from lcrag.service.access import principal
from lcrag.service.answer_cache import from_cache
from lcrag.service.answering import Answering, Busy
from lcrag.store.collections import NotFound
from lcrag.service.keys import Principal
from lcrag.service.limits import Limits
from lcrag.service.mcp.sessions import SessionLimits
from lcrag.service.metrics import Metrics
from lcrag.service.questions import Questions
from lcrag.service.requests import AskRequest

MAX_PASSAGES = 100
# Seconds between stopping the questions at the end of a shutdown's drain and ending the event streams still open: a
# stopped question's tool error is written on its stream first (uvicorn cancels what is left a second later).
STREAMS_GRACE = 1.0
FILE_URI = "lcrag://collections/{name}/files/{file}"
INSTRUCTIONS = ("Answers questions over the document collections listed by list_collections. `ask` answers with "
                "sources, choosing per question between reading retrieved passages (RAG) and the whole collection "
                "(LC); `search` returns the passages alone, without a model call.")


class Answered(BaseModel):
    answer: str
    route: str
    strategy: str
    cost: dict[str, Any]
    usage: dict[str, int]
    sources: list[dict[str, Any]]
    conversation: dict[str, Any] | None = None
    from_cache: bool = False  # answered from the store's answer cache or every call from the completion cache
    routing: dict[str, Any] | None = None  # a learned router's choice: score, threshold, LC share held and realized


class Passages(BaseModel):
    collection: str
    query: str
    passages: list[dict[str, Any]]


def one_line(exc: Exception) -> str:
    """An error as the agent reads it: lcrag's own message, or a request's first invalid field."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "arguments"
        return f"{where}: {first['msg']}"
    return " ".join(str(exc).split())[:500]


PLAIN_TEXT = (".txt", ".md", ".markdown")  # formats whose text is about as large as the file: checked before reading


def _utf8_size(text: str) -> int:
    """The UTF-8 size of ``text``, without encoding it when its length alone decides (1 to 4 bytes a character)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _caller(ctx: Any) -> Principal:
    """Who makes a call: the key of the HTTP request it came in (set by the guard), else (stdio) the local user."""
    return principal(_http_request(ctx))


def _visible(ctx: Any, collection: str) -> None:
    """A collection outside the caller's patterns is unknown to it (the same words as one that does not exist)."""
    if not _caller(ctx).sees(collection):
        raise NotFound(f"unknown collection {collection[:64]!r}")


def _http_request(ctx: Any):
    """The HTTP request a tool call came in (streamable HTTP), else None (stdio, or outside a request)."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except (AttributeError, LookupError, ValueError):
        return None
    return request if callable(getattr(request, "is_disconnected", None)) else None


class LcragMCP(SDKServer):
    """The MCP server: tools over an :class:`Answering` engine, and the collections' files as resources."""

    def __init__(self, answering: Answering, limits: Limits | None = None, sessions: SessionLimits | None = None,
                 **settings: Any):
        limits = limits or Limits()
        sessions = sessions or SessionLimits()
        # Host names are checked by the service's guard in front (lcrag.service.http.guard), by the same rules as lcrag
        # serve's; the SDK's own check would refuse every name but loopback's. The body limit: lcrag mcp --max-body-kb.
        http = {"transport_security": settings.pop("transport_security",
                                                   TransportSecuritySettings(enable_dns_rebinding_protection=False)),
                "max_request_body_size": settings.pop("max_request_body_size", limits.max_body_bytes)}
        # Sessions are bounded in front of the SDK (lcrag.service.mcp.sessions); the SDK's own idle timeout and cap,
        # where it has them, stand behind as a backstop.
        takes = inspect.signature(SDKServer.streamable_http_app if SDK_MAJOR >= 2 else SDKServer.__init__).parameters
        if "session_idle_timeout" in takes and "max_sessions" in takes:
            http |= {"session_idle_timeout": sessions.idle_timeout + 60, "max_sessions": sessions.max_sessions + 64}
        self.limits = limits
        # 1.x takes the streamable HTTP settings at construction, 2.x when it makes the app (streamable_http_app).
        self.http_settings = http if SDK_MAJOR >= 2 else {}
        super().__init__("lcrag", instructions=INSTRUCTIONS, **settings, **({} if SDK_MAJOR >= 2 else http))
        self.answering = answering
        self.questions = Questions(answering, limits, Metrics())
        self._end_streams: Callable[[], None] | None = None  # set by hold_streams
        self.add_tool(self.list_collections, "list_collections", structured_output=True,
                      description="The document collections, with their files and indexing state.")
        self.add_tool(self.ask, "ask", structured_output=True, description=(
            "Answer a question over a collection, with the route taken (rag or lc), tokens, cost and sources. "
            "Options as in lcrag's API: strategy, retriever, k, budget, ..., and `history` (earlier messages) for "
            "a follow-up."))
        self.add_tool(self.search, "search", structured_output=True, description=(
            "The passages of a collection that best match a query (file, pages, section, and a quote as `snippet`), "
            "no model call."))
        self.add_resource_template_for_files()

    # -- tools --------------------------------------------------------------------------------------------------
    # Every call to the store runs off the event loop: a store may be PostgreSQL across the network.
    async def list_collections(self, ctx: Context | None = None) -> dict[str, list[dict[str, Any]]]:
        collections, caller = self.answering.collections, _caller(ctx)
        try:
            return {"collections": await asyncio.to_thread(
                lambda: [collections.describe(n) for n in collections.names() if caller.sees(n)])}
        except LcragError as exc:  # the store's database out of reach (StoreDown): said in one line
            raise ToolError(one_line(exc)) from None

    async def ask(self, question: str, collection: str, options: dict[str, Any] | None = None,
                  history: list[dict[str, Any]] | None = None, ctx: Context | None = None,
                  **choices: Any) -> Answered:
        """``choices``: the declared per-question settings a client may choose (see :func:`with_choices`)."""
        given = {"question": question, "collection": collection, "options": options, "history": history, **choices}
        given = {name: value for name, value in given.items() if value is not None}
        try:
            request = AskRequest.model_validate(given)
            _visible(ctx, collection)
            await asyncio.to_thread(self.answering.collections.files_dir, collection)
            # Over HTTP, the request that carries the call: a client that leaves cancels its question, as in lcrag
            # serve (dropped from the queue, or its generation stopped; lcrag_cancelled_total).
            answer = await self.questions.answer(collection, question, request.answer_options(), _http_request(ctx),
                                                 history=request.conversation())
        except (LcragError, NotFound, Busy, ValidationError, streaming.Cancelled) as exc:  # shutdown: stopped
            raise ToolError(one_line(exc)) from None
        return Answered(answer=answer.text, route=answer.route, strategy=answer.strategy,
                        cost=self.answering.cost(answer), sources=[s.to_dict() for s in answer.sources],
                        usage={"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                               "cached_prompt_tokens": sum(c.cached_prompt_tokens for c in answer.calls)},
                        conversation=answer.conversation, routing=answer.routing,
                        from_cache=from_cache(answer))

    async def search(self, query: str, collection: str, k: int = 5, retriever: str | None = None,
                     ctx: Context | None = None) -> Passages:
        try:
            if isinstance(k, bool) or not 1 <= k <= MAX_PASSAGES:
                raise ToolError(f"k: between 1 and {MAX_PASSAGES}, got {k}")
            _visible(ctx, collection)
            self.questions.check(query, {} if retriever is None else {"retriever": retriever}, field="query")
            # Its own thread, not the answering pool: a search never waits behind questions queued for the reader.
            passages = await asyncio.to_thread(self.answering.search, collection, query, k, retriever)
        except (LcragError, NotFound, Busy) as exc:
            raise ToolError(one_line(exc)) from None
        return Passages(collection=collection, query=query, passages=passages)

    # -- shutdown ------------------------------------------------------------------------------------------------
    def hold_streams(self) -> None:
        """Keep the SDK's event streams open through a shutdown's drain: sse_starlette ends every one at the signal,
        which cuts off a tool call in progress (its answer is sent on its stream) instead of letting it finish
        within --shutdown-seconds; :meth:`stop_work` ends them. For `lcrag mcp --transport http`'s own process:
        the setting is the process's."""
        try:
            from sse_starlette.sse import AppStatus
        except ImportError:  # an SDK without it: nothing ends the streams early
            return
        AppStatus.disable_automatic_graceful_drain()
        self._end_streams = lambda: setattr(AppStatus, "should_exit", True)

    def stop_work(self) -> None:
        """What the server does once its shutdown has drained for --shutdown-seconds: the questions still running
        are stopped (each answers its call with a tool error) and, :data:`STREAMS_GRACE` later, the event streams
        still open are ended (called on the event loop)."""
        self.answering.stop_questions()
        if self._end_streams is not None:
            asyncio.get_running_loop().call_later(STREAMS_GRACE, self._end_streams)

    def streamable_http_app(self, **options: Any):
        """The streamable HTTP app at /mcp, with lcrag's settings whichever SDK major makes it."""
        return super().streamable_http_app(**{**self.http_settings, **options})

    # -- resources ----------------------------------------------------------------------------------------------
    def add_resource_template_for_files(self) -> None:
        # 2.x hands a template its request's context; 1.x (before 1.13) takes no parameter the URI does not name.
        self.resource(FILE_URI, name="collection file", mime_type="text/plain",
                      description="The text lcrag extracted from one file of a collection")(
            self.file_text if SDK_MAJOR >= 2 else self._file_text_1x)

    async def _file_text_1x(self, name: str, file: str) -> str:
        return await self.file_text(name, file, self.get_context())

    async def file_text(self, name: str, file: str, ctx: Context | None = None) -> str:
        """A collection's file as lcrag reads it; only the collection's own files, by their listed names, of a
        collection the caller's key may see. Parsed in the service's sandbox, off the event loop (other clients go
        on meanwhile), once per content: a file a question or an indexing run already read is not parsed again."""
        if SDK_MAJOR < 2:  # 1.x hands over the URI's text as it is, 2.x its decoded values
            name, file = unquote(name), unquote(file)
        try:
            _visible(ctx, name)
            path = await asyncio.to_thread(self.answering.collections.file, name, file)
            self._resource_fits(file, path.stat().st_size if path.suffix.lower() in PLAIN_TEXT else 0)
            documents, skipped = await asyncio.to_thread(self.answering.parser.load_files, [path])
        except (LcragError, NotFound) as exc:
            raise ResourceError(one_line(exc)) from None
        if not documents:
            raise ResourceError(f"{file[:60]!r} has no readable text: "
                                + (self.answering.collections.public(skipped[0]) if skipped else "unknown format"))
        self._resource_fits(file, _utf8_size(documents[0].text))
        return documents[0].text

    def _resource_fits(self, file: str, size: int) -> None:
        """Refuse a resource over ``lcrag mcp --max-resource-mb``: a read is answered whole, in one message, so it
        is bounded rather than streamed (``search`` reads a collection by parts)."""
        if size > self.limits.max_resource_bytes:
            raise ResourceError(f"{file[:60]!r} is {size / 1e6:,.1f} MB of text, over this server's "
                                f"{self.limits.max_resource_bytes / 1e6:,.1f} MB per resource (lcrag mcp "
                                "--max-resource-mb); the search tool reads it by passages")

    async def _handle_list_resources(self, ctx, params):
        """2.x: the resources listed for the request's caller (the SDK's own handler calls list_resources with no
        context)."""
        from mcp.types import ListResourcesResult

        return ListResourcesResult(resources=await self.list_resources(principal(getattr(ctx, "request", None))))

    async def list_resources(self, caller: Principal | None = None) -> list[Resource]:
        """The files of every collection the caller's key may see, each as a resource (besides the template that
        names any of them). 1.x calls it with no caller: the request's is found in its context."""
        if caller is None:
            caller = _caller(self.get_context() if SDK_MAJOR < 2 else None)
        collections = self.answering.collections
        listed = await asyncio.to_thread(lambda: [(name, stored["name"]) for name in collections.names()
                                                  if caller.sees(name) for stored in collections.files(name)])
        return [Resource(uri=FILE_URI.format(name=quote(name, safe=""), file=quote(file, safe="")),
                         name=f"{name}/{file}", mimeType="text/plain") for name, file in listed]


def with_choices(ask: Callable, declared: Iterable[QuestionSetting] = QUESTION_SETTINGS) -> Callable:
    """``ask`` taking, in its signature (the tool's published parameters), each declared per-question setting a
    client may choose in place of its ``**choices``: typed and described as the HTTP request's fields, their bounds
    in the schema and checked by :class:`AskRequest` (one line, as every other bad argument)."""
    signature = inspect.signature(ask, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    declared_choices = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=None)
                        for name, kind in request_fields(declared, enforced=False).items()]
    ask.__signature__ = signature.replace(parameters=[*own, *declared_choices])
    ask.__annotations__ = {**ask.__annotations__, **{p.name: p.annotation for p in declared_choices}}
    ask.__annotations__.pop("choices", None)
    return ask


with_choices(LcragMCP.ask)
