"""Collections over HTTP: create, list, describe and delete them; upload documents (streamed to disk, indexed in the
background); download a file as it was uploaded — served inert, as a type that cannot run script on this origin.
Every call to the store runs off the event loop (a plain ``def`` route runs in the thread pool): a store may be a
database across the network, and one slow call must not hold every other request."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import FileResponse, JSONResponse

from lcrag.service.access import Forbidden, audit, require, visible, visible_names
from lcrag.service.answering import Answering
from lcrag.store.collections import NotFound
from lcrag.service.http.deps import answering, limits
from lcrag.service.limits import Limits
from lcrag.service.requests import NewCollection
from lcrag.service.uploads import StreamedUpload

# An uploaded file is the uploader's content on this origin: it is shown only as a type that cannot run script
# (a PDF in the browser's viewer, plain text, in a sandbox), anything else is a download.
SHOWN_INLINE = {".pdf": "application/pdf", ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8",
                ".jsonl": "text/plain; charset=utf-8"}
FILE_CSP = "default-src 'none'; sandbox"

router = APIRouter(prefix="/v1/collections")
Engine = Annotated[Answering, Depends(answering)]


@router.get("")
def list_collections(request: Request, engine: Engine):
    """The collections the request's key may see (a key with patterns: only those)."""
    return {"data": described(engine.collections, visible_names(request, engine.collections.names()))}


def described(collections, names: list[str]) -> list[dict]:
    """The collections named, each described; one deleted meanwhile (by another client, or another replica) is
    left out."""
    listed = []
    for name in names:
        try:
            listed.append(collections.describe(name))
        except NotFound:
            pass
    return listed


@router.post("", status_code=201)
def create_collection(body: NewCollection, request: Request, engine: Engine):
    holder = require(request, "admin")
    if not holder.sees(body.name):
        raise Forbidden(f"the key {holder.name!r} may create only collections matching {', '.join(holder.patterns)}")
    created = engine.collections.create(body.name)
    audit(request, "collection.create", body.name)
    return created


@router.get("/{name}")
def get_collection(name: str, request: Request, engine: Engine, files: bool = True):
    """The collection's files and status; ``?files=false``: its status only (what a client polling for ready needs,
    the same few bytes for 5 or 5,000 files)."""
    visible(request, name)
    described = (engine.collections.describe(name) if files
                 else {"name": name, "status": asdict(engine.collections.status(name))})
    costs = engine.index_cost(name)  # summaries its indexing wrote with the reader (tree, RAPTOR), when offered
    # Plain JSON already, encoded as it is: FastAPI's jsonable_encoder walks every file's entry (56 ms for 5,000 files,
    # holding the interpreter from the indexing of the upload a client polls this for; json.dumps takes 4 ms).
    return JSONResponse(described | ({"index_cost": costs} if costs else {}))


@router.delete("/{name}")
def delete_collection(name: str, request: Request, engine: Engine):
    visible(request, name)
    require(request, "admin")
    engine.collections.delete(name)
    engine.forget(name)
    audit(request, "collection.delete", name)
    return {"deleted": name}


@router.post("/{name}/files", status_code=201,
             openapi_extra={"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
                 "type": "object", "required": ["file"],
                 "properties": {"file": {"type": "string", "format": "binary"}}}}}}})
async def upload(name: str, request: Request, engine: Engine, limit: Annotated[Limits, Depends(limits)]):
    """A multipart ``file``, streamed from the body to its place in the collection once (:mod:`..uploads`)."""
    visible(request, name)
    require(request, "writer")
    collections = engine.collections
    await anyio.to_thread.run_sync(collections.files_dir, name)
    body = StreamedUpload(request)
    filename = await body.start()

    def chunks():
        while (chunk := anyio.from_thread.run(body.next_chunk)) is not None:
            yield chunk

    stored = await anyio.to_thread.run_sync(collections.add_file, name, filename, chunks(), limit.max_upload_bytes)
    engine.forget(name)
    await anyio.to_thread.run_sync(audit, request, "file.upload", name, f"{stored['name']} ({stored['bytes']:,} bytes)")
    return stored | {"status": asdict(await anyio.to_thread.run_sync(collections.status, name))}


@router.delete("/{name}/files/{filename}")
async def delete_file(name: str, filename: Annotated[str, Path(max_length=255)], request: Request, engine: Engine):
    """Remove one file: the collection is indexed again without it (its segment leaves the collection's index)."""
    visible(request, name)
    require(request, "writer")
    await anyio.to_thread.run_sync(engine.collections.remove_file, name, filename)
    engine.forget(name)
    await anyio.to_thread.run_sync(audit, request, "file.delete", name, filename)
    return {"deleted": filename, "status": asdict(await anyio.to_thread.run_sync(engine.collections.status, name))}


@router.get("/{name}/files/{filename}")
def download(name: str, filename: Annotated[str, Path(max_length=255)], request: Request, engine: Engine):
    path = engine.collections.file(visible(request, name), filename)
    inline = SHOWN_INLINE.get(path.suffix.lower())
    headers = {} if inline == "application/pdf" else {"Content-Security-Policy": FILE_CSP}
    return FileResponse(path, media_type=inline or "application/octet-stream", filename=filename,
                        content_disposition_type="inline" if inline else "attachment", headers=headers)
