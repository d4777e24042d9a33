"""What a route needs from the app, as FastAPI dependencies: the answering engine, the question handling and the
operator's limits, set on the app's state once by :func:`lcrag.service.http.app.create_app`."""

from __future__ import annotations

from fastapi import Request

from lcrag.service.answering import Answering
from lcrag.service.limits import Limits
from lcrag.service.questions import Questions


def answering(request: Request) -> Answering:
    return request.app.state.answering


def questions(request: Request) -> Questions:
    return request.app.state.questions


def limits(request: Request) -> Limits:
    return request.app.state.limits
