"""`lcrag serve`: the HTTP service and its web page, on the same validated configuration as the CLI."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from lcrag.cli.engine import check_bind, check_key, engine, request_limits
from lcrag.cli.service_flags import ServiceFlags, with_service_flags
from lcrag.core.errors import OptionError


@with_service_flags()
def serve(
    max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", help="Largest upload accepted (413 above).", min=0.001)] = 512,
    cors_origin: Annotated[Optional[list[str]], typer.Option("--cors-origin", help="A web origin allowed to call the API from the browser (CORS), e.g. https://app.example; repeatable. None by default.")] = None,
    *,
    flags: ServiceFlags,
) -> None:
    """Serve collections over HTTP: an OpenAI-compatible API, the native ask API and a web page at /."""
    check_key(flags.api_key)
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        raise OptionError("lcrag serve needs the service's libraries: pip install -e '.[serve]' in lcrag's checkout") from None
    from lcrag.service.http.app import create_app
    from lcrag.service.http.server import Gate, run
    from lcrag.service.keys import keys_for

    answering = engine(flags)
    check_bind(flags.host, flags.api_key, answering=answering)  # keys added to the store protect it as --api-key does
    limits = request_limits(flags, answering.retrievers, max_upload_bytes=int(max_upload_mb * 1024 * 1024),
                            cors_origins=tuple(cors_origin or ()))
    connections = flags.connection_limits()
    gate = Gate(connections, "lcrag serve")
    app = create_app(answering, flags.api_key, limits, gate=gate,
                     keys=keys_for(answering.collections, flags.audit_retention))
    typer.echo(f"lcrag serving http://{flags.host}:{flags.port}/ (collections in {answering.collections.root})", err=True)
    try:
        run(app, flags.host, flags.port, connections, os.environ.get("LCRAG_SERVE_LOG", "warning"), "lcrag serve", gate,
            flags.shutdown_seconds, answering.stop_questions, answering.close)
    finally:
        answering.close()
