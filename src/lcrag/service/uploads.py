"""An upload streamed from the request body to its place once: the multipart body is parsed as it arrives
(python-multipart's push parser) and the file part's bytes are handed on as they come, never spooled to a temporary
file first (Starlette's ``UploadFile`` writes the whole body to ``$TMPDIR`` — RAM where it is a tmpfs — before the
route sees it, and the route copied it again)."""

from __future__ import annotations

from collections import deque

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from python_multipart.multipart import MultipartParser, parse_options_header


def _missing(field: str, why: str) -> RequestValidationError:
    return RequestValidationError([{"type": "missing", "loc": ("body", field), "msg": why, "input": None}])


class StreamedUpload:
    """The part named ``field`` of a multipart request body, read as the body streams in: :meth:`start` reads up
    to the part's headers (its file name), then :meth:`next_chunk` gives its bytes as they arrive (None at its end).
    Other parts are skipped."""

    def __init__(self, request: Request, field: str = "file"):
        content_type, options = parse_options_header(request.headers.get("content-type", ""))
        if content_type != b"multipart/form-data" or not options.get(b"boundary"):
            raise _missing(field, "a multipart/form-data body with a file part is required")
        self.field = field
        self.filename: str | None = None
        self._body = request.stream().__aiter__()
        self._ended = False  # the body is all read
        self._part_done = False  # the file part is all read
        self._in_part = False
        self._headers: dict[bytes, bytes] = {}
        self._header = [b"", b""]
        self._ready: deque[bytes] = deque()
        self._parser = MultipartParser(options[b"boundary"], {
            "on_part_begin": self._begin, "on_header_field": self._field, "on_header_value": self._value,
            "on_header_end": self._header_end, "on_headers_finished": self._headers_done,
            "on_part_data": self._data, "on_part_end": self._end})

    # -- the parser's callbacks
    def _begin(self) -> None:
        self._headers, self._header = {}, [b"", b""]

    def _field(self, data: bytes, start: int, end: int) -> None:
        self._header[0] += data[start:end]

    def _value(self, data: bytes, start: int, end: int) -> None:
        self._header[1] += data[start:end]

    def _header_end(self) -> None:
        self._headers[self._header[0].lower()] = self._header[1]
        self._header = [b"", b""]

    def _headers_done(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        if self.filename is None and options.get(b"name", b"").decode("utf-8", "replace") == self.field:
            self.filename = options.get(b"filename", b"").decode("utf-8", "surrogateescape")
            self._in_part = True

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._in_part and end > start:
            self._ready.append(data[start:end])

    def _end(self) -> None:
        if self._in_part:
            self._in_part, self._part_done = False, True

    # -- reading
    async def _feed(self) -> None:
        try:
            chunk = await self._body.__anext__()
        except StopAsyncIteration:
            self._ended = True
            self._parser.finalize()
            return
        if chunk:
            self._parser.write(chunk)

    async def start(self) -> str:
        """The file part's name as sent, once its headers have arrived (422 when the body has no such part)."""
        while self.filename is None and not self._ended:
            await self._feed()
        if self.filename is None:
            raise _missing(self.field, "Field required")
        return self.filename

    async def next_chunk(self) -> bytes | None:
        """The file part's next bytes as they arrive; None when it has ended."""
        while not self._ready and not self._part_done and not self._ended:
            await self._feed()
        return self._ready.popleft() if self._ready else None
