"""Server-sent events, as both streaming APIs send them."""

from __future__ import annotations

import json
from typing import Any


def sse(data: Any, event: str | None = None) -> str:
    name = f"event: {event}\n" if event else ""
    return f"{name}data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"
