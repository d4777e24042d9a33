"""The HTTP client, by its former name: it now lives in :mod:`lcrag.http`, below every stage, because the embedder
(retrieval) and the server tokenizer use it as well as the readers."""

from lcrag.http import (
    DEFAULT_TIMEOUT,
    RETRY_STATUS,
    DeadlineExceeded,
    HttpClient,
    check_base_url,
    per_operation_timeout,
    resolve_endpoint,
    run_within,
    scrub,
    secrets_of,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "RETRY_STATUS",
    "DeadlineExceeded",
    "HttpClient",
    "check_base_url",
    "per_operation_timeout",
    "resolve_endpoint",
    "run_within",
    "scrub",
    "secrets_of",
]
