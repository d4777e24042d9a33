"""Credentials never leave the process: URLs are redacted wherever they are printed or stored."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str | None) -> str | None:
    """``url`` with any ``user:password@`` replaced by ``***@`` (query strings with keys are cut too); several URLs
    separated by commas (a pool of servers) each so."""
    if not url:
        return url
    if "," in url:
        return ",".join(redact_url(part.strip()) or "" for part in url.split(","))
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "***" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_spec(spec: str | None) -> str | None:
    """A model spec as stored or shown: ``openai:MODEL@URL`` with the URL's credentials redacted."""
    if not spec or "@" not in spec or not spec.startswith("openai:"):
        return spec
    model, _, url = spec.partition("@")
    return f"{model}@{redact_url(url)}"
