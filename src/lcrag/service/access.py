"""What a request's key may do, for the routes and the MCP server: its holder (:class:`lcrag.service.keys.Principal`,
set on the request by the guard), its role checked (403), its collections (one outside its patterns is unknown to it:
404, the same answer as a collection that does not exist), and its changes written to the audit log.

``/metrics`` is readable by every key; a series labelled with a collection (``collection="NAME"``) is shown to a
scoped key only for its own collections."""

from __future__ import annotations

import logging

from lcrag.store.collections import NotFound
from lcrag.service.keys import ANONYMOUS, Principal

log = logging.getLogger(__name__)


class Forbidden(PermissionError):
    """The key's role does not allow the request (HTTP 403)."""


def principal(request) -> Principal:
    """The request's key holder; a request the guard did not see (stdio MCP, a test's bare app) is the local user's."""
    state = getattr(request, "state", None)
    return getattr(state, "principal", None) or ANONYMOUS


def require(request, role: str) -> Principal:
    holder = principal(request)
    if not holder.can(role):
        article = "an" if role[0] in "aeiou" else "a"
        raise Forbidden(f"the key {holder.name!r} is a {holder.role} key: this needs {article} {role} key")
    return holder


def require_unscoped_admin(request) -> Principal:
    holder = require(request, "admin")
    if not holder.unscoped_admin:
        raise Forbidden(f"the key {holder.name!r} is limited to some collections: keys and the audit log need an admin "
                        "key over every collection")
    return holder


def visible(request, collection: str) -> str:
    """``collection`` when the request's key may see it, else :class:`NotFound` as for an unknown collection."""
    if not principal(request).sees(collection):
        raise NotFound(f"unknown collection {collection[:64]!r}")
    return collection


def visible_names(request, names: list[str]) -> list[str]:
    holder = principal(request)
    return [name for name in names if holder.sees(name)]


def audit(request, action: str, collection: str | None = None, detail: str | None = None) -> None:
    """Record a change made by the request's key. The change is made: a log that cannot be written is logged here
    (with the entry) and the request still succeeds."""
    keys = getattr(request.app.state, "keys", None)
    if keys is None:
        return
    actor = principal(request).name
    try:
        keys.record(actor, action, collection, detail)
    except Exception as exc:  # noqa: BLE001 - KeysUnavailable, or the store failing otherwise: the change stands
        log.error("audit log not written (%s by %s on %s: %s): %s", action, actor, collection, detail, exc)


class ScopedRegistry:
    """A Prometheus registry as a scoped key may read it: every series labelled ``collection`` with a collection
    outside the key's patterns left out."""

    def __init__(self, registry, holder: Principal):
        self.registry, self.holder = registry, holder

    def collect(self):
        from prometheus_client.metrics_core import Metric

        for family in self.registry.collect():
            shown = Metric(family.name, family.documentation, family.type, family.unit)
            shown.samples = [s for s in family.samples
                             if "collection" not in s.labels or self.holder.sees(s.labels["collection"])]
            yield shown


def metrics_registry(request, registry):
    """The registry to render for this request's key."""
    holder = principal(request)
    return registry if not holder.patterns else ScopedRegistry(registry, holder)
