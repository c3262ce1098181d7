"""Typed API errors and the one place that turns them (and every other failure) into responses.

Why one place: a status code chosen where the error is raised, or by matching an exception's
message text, drifts as messages change (a "question" in a filter error became a 422 on the wrong
field). Routes raise a typed `ApiError`; the app-level handlers below render every error, including
framework ones (unknown route, bad JSON, pydantic validation) and unexpected crashes, as the same
JSON shape:

    {"error": {"message": str, "field": str | null, "type": str, "errors": [{"field", "message", "type"}]}}

`field` is a dotted path into the request (`options.max_tokens`, `filters.year`, `body`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from indexing.pg_connect import StoreUnavailable
from retrieval.collection_index import IndexMismatchError

log = logging.getLogger("rag.server")


class ApiError(Exception):
    """Base of every error a route raises on purpose; the subclass decides the status."""

    status: int = 400
    type_: str = "invalid_request_error"

    def __init__(self, message: str, field: str | None = None, headers: Mapping[str, str] | None = None,
                 errors: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.message, self.field, self.headers = message, field, dict(headers or {})
        self.errors = errors


class InvalidRequest(ApiError):
    """A field's value is wrong (type, range, format, empty)."""

    status = 422


class FilterError(InvalidRequest):
    """A metadata filter that cannot be parsed or uses an unknown operator."""


class LimitError(ApiError):
    """The request is well-formed but larger than a configured limit (body, question, prompt)."""

    status = 413
    type_ = "request_too_large"


class UnsupportedMedia(ApiError):
    status = 415


class NotFound(ApiError):
    status = 404
    type_ = "not_found"


class Unauthorized(ApiError):
    status = 401
    type_ = "authentication_error"


class Busy(ApiError):
    """Backpressure: the admission queue is full; the client should retry after `Retry-After`."""

    status = 429
    type_ = "rate_limit_error"


class IndexConflict(ApiError):
    """The request is valid but the collection's index cannot serve it (e.g. `mode: graph` on a
    collection indexed without the graph): the fix is a reindex, not another request."""

    status = 409


class NotImplementedByBackend(ApiError):
    """The route needs a capability the configured backend lacks (a remote generator has no
    prefix cache): no retry will help, so 501, with a message naming the backend."""

    status = 501
    type_ = "not_implemented"


class NotReady(ApiError):
    """Models are loading, the load failed, or the server is shutting down."""

    status = 503
    type_ = "unavailable"


def error_body(message: str, field: str | None = None, type_: str = "invalid_request_error",
               errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    first = {"field": field, "message": message, "type": type_}
    return {"error": {"message": message, "field": field, "type": type_, "errors": errors or [first]}}


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(error_body(exc.message, exc.field, exc.type_, exc.errors), status_code=exc.status,
                        headers=exc.headers or None)


def field_path(loc: Iterable[Any], error_type: str = "") -> str:
    """Dotted field path of a pydantic/FastAPI error location.

    `("body", "options", "max_tokens")` -> `options.max_tokens`; `("body",)` (no body, or a body
    that is not an object) -> `body`. A JSON syntax error's location holds the character offset
    (`("body", 18)`), which is not a field: it is reported as `body`.
    """
    loc = list(loc)
    if error_type == "json_invalid" or not loc:
        return "body"
    parts = [str(x) for x in loc[1:]] if loc[0] in ("body", "query", "path", "header") else [str(x) for x in loc]
    return ".".join(parts) or str(loc[0])


def from_validation(errors: list[Mapping[str, Any]], prefix: tuple[Any, ...] = ()) -> InvalidRequest:
    """One InvalidRequest for a list of pydantic errors; the first one names `field`."""
    items = []
    for e in errors:
        loc = (*prefix, *e.get("loc", ()))
        f = field_path(loc, str(e.get("type", "")))
        msg = "not valid JSON" if e.get("type") == "json_invalid" else str(e.get("msg", "invalid"))
        items.append({"field": f, "message": msg, "type": str(e.get("type", "value_error"))})
    if not items:
        items = [{"field": "body", "message": "invalid request", "type": "value_error"}]
    first = items[0]
    return InvalidRequest(f"{first['field']}: {first['message']}", first["field"], errors=items)


def install(app: FastAPI) -> None:
    """Register the handlers; the only code in the server that maps errors to status codes."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def request_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(from_validation(list(exc.errors())))

    @app.exception_handler(ValidationError)
    async def model_validation(_: Request, exc: ValidationError) -> JSONResponse:
        return error_response(from_validation(list(exc.errors()), ("body",)))

    @app.exception_handler(IndexMismatchError)
    async def index_mismatch(_: Request, exc: IndexMismatchError) -> JSONResponse:
        return error_response(IndexConflict(str(exc), "mode"))

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(_: Request, exc: StoreUnavailable) -> JSONResponse:
        # The database went away (Postgres backend): the request may succeed later, so 503, not 500.
        return error_response(NotReady(str(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Raised by the framework itself: unknown route (404), wrong method (405).
        type_ = "not_found" if exc.status_code == 404 else "invalid_request_error"
        # 400 comes from the framework's body parsers (e.g. malformed multipart data).
        field = {400: "body", 404: "path", 405: "method"}.get(exc.status_code)
        return JSONResponse(error_body(str(exc.detail), field, type_), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}", None, "server_error"),
                            status_code=500)
