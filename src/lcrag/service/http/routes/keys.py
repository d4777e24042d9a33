"""Keys and the audit log over HTTP, for an admin key over every collection: ``POST /v1/keys`` adds one (the key is in
the answer, the only time it is shown), ``GET /v1/keys`` lists them (never a key), ``DELETE /v1/keys/NAME`` revokes
one (refused by every replica within a second), ``GET /v1/audit`` reads the log of changes, newest first. Each call
to the store runs in the thread pool (a plain ``def`` route): the store may be a database across the network."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from lcrag.service.access import require_unscoped_admin
from lcrag.store.collections import NotFound
from lcrag.service.keys import MAX_AUDIT_PAGE, ROLES

router = APIRouter()


class NewKey(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(max_length=64)
    role: str = Field("reader", max_length=16, description=f"one of {', '.join(ROLES)}")
    collections: list[Annotated[str, Field(max_length=80)]] = Field(default_factory=list, max_length=64,
                                                                    description="fnmatch patterns, e.g. team-a*")


@router.post("/v1/keys", status_code=201)
def add_key(body: NewKey, request: Request):
    holder = require_unscoped_admin(request)
    return request.app.state.keys.add(body.name, body.role, body.collections, by=holder.name)


@router.get("/v1/keys")
def list_keys(request: Request, revoked: bool = False):
    require_unscoped_admin(request)
    return {"data": request.app.state.keys.listed(revoked)}


@router.delete("/v1/keys/{name}")
def revoke_key(name: Annotated[str, Path(max_length=64)], request: Request):
    holder = require_unscoped_admin(request)
    try:
        request.app.state.keys.revoke(name, by=holder.name)
    except LookupError as exc:
        raise NotFound(str(exc)) from None
    return {"revoked": name}


@router.get("/v1/audit")
def audit(request: Request, limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_PAGE)] = 100,
          before: Annotated[int | None, Query(ge=1)] = None):
    """The changes, newest first: ``limit`` a page; ``before`` the ``next`` of the page before (older entries)."""
    require_unscoped_admin(request)
    entries = request.app.state.keys.audit(limit, before)
    return {"data": entries, "next": entries[-1]["id"] if len(entries) == limit else None}
