"""Collections over HTTP: create, list, describe and delete them; upload documents (streamed to disk, indexed in the
background); download a file as it was uploaded — served inert, as a type that cannot run script on this origin."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, File, Path, UploadFile
from fastapi.responses import FileResponse

from lcrag.service.answering import Answering
from lcrag.service.deps import answering, limits
from lcrag.service.limits import Limits
from lcrag.service.requests import NewCollection

UPLOAD_CHUNK = 1 << 20
# An uploaded file is the uploader's content on this origin: it is shown only as a type that cannot run script
# (a PDF in the browser's viewer, plain text, in a sandbox), anything else is a download.
SHOWN_INLINE = {".pdf": "application/pdf", ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8",
                ".jsonl": "text/plain; charset=utf-8"}
FILE_CSP = "default-src 'none'; sandbox"

router = APIRouter(prefix="/v1/collections")
Engine = Annotated[Answering, Depends(answering)]


@router.get("")
async def list_collections(engine: Engine):
    return {"data": [engine.collections.describe(n) for n in engine.collections.names()]}


@router.post("", status_code=201)
async def create_collection(body: NewCollection, engine: Engine):
    return engine.collections.create(body.name)


@router.get("/{name}")
async def get_collection(name: str, engine: Engine):
    return engine.collections.describe(name)


@router.delete("/{name}")
async def delete_collection(name: str, engine: Engine):
    engine.collections.delete(name)
    engine.forget(name)
    return {"deleted": name}


@router.post("/{name}/files", status_code=201)
async def upload(name: str, engine: Engine, limit: Annotated[Limits, Depends(limits)],
                 file: UploadFile = File(...)):
    collections = engine.collections
    collections.files_dir(name)

    def chunks():
        while chunk := file.file.read(UPLOAD_CHUNK):
            yield chunk

    stored = await asyncio.to_thread(collections.add_file, name, file.filename or "", chunks(),
                                     limit.max_upload_bytes)
    engine.forget(name)
    return stored | {"status": collections.describe(name)["status"]}


@router.get("/{name}/files/{filename}")
async def download(name: str, filename: Annotated[str, Path(max_length=255)], engine: Engine):
    path = engine.collections.file(name, filename)
    inline = SHOWN_INLINE.get(path.suffix.lower())
    headers = {} if inline == "application/pdf" else {"Content-Security-Policy": FILE_CSP}
    return FileResponse(path, media_type=inline or "application/octet-stream", filename=filename,
                        content_disposition_type="inline" if inline else "attachment", headers=headers)
