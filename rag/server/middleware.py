"""Request guards: body size, API keys, per-endpoint metrics, and JSON errors that name the field."""

from __future__ import annotations

import json
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .state import ServerState

OPEN_EXACT = ("/health", "/ready", "/", "/openapi.json")
OPEN_PREFIX = ("/docs", "/static/")


def error_body(message: str, field: str | None = None, type_: str = "invalid_request_error", **extra) -> dict:
    return {"error": {"message": message, "field": field, "type": type_, **extra}}


class BodyLimit:
    """Rejects bodies over the limit with 413, by Content-Length or while streaming them in."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._reject(send)
        seen = 0

        async def limited():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._reject(send)

    async def _reject(self, send):
        body = json.dumps(error_body(f"request body exceeds {self.limit} bytes", "body",
                                     "request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


def install(app: FastAPI, state: ServerState) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next):
        path = request.url.path
        endpoint = _endpoint(request)
        t0 = time.perf_counter()
        keys = state.api_keys()
        if keys and path not in OPEN_EXACT and not path.startswith(OPEN_PREFIX):
            auth = request.headers.get("authorization", "")
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
            if token not in keys:
                state.registry.requests.inc(endpoint, "401")
                return JSONResponse(error_body("missing or invalid API key", "Authorization",
                                               "authentication_error"), status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        if state.draining and path.startswith("/v1/"):
            return JSONResponse(error_body("server is shutting down", None, "unavailable"), status_code=503,
                                headers={"Retry-After": str(state.server.retry_after_s)})
        response = await call_next(request)
        state.registry.requests.inc(endpoint, str(response.status_code))
        state.registry.latency.observe(time.perf_counter() - t0, endpoint)
        return response

    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [str(x) for x in first.get("loc", ()) if x not in ("body", "query", "path")]
        field = ".".join(loc) or None
        msg = f"{field}: {first.get('msg', 'invalid')}" if field else first.get("msg", "invalid request")
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors]
        return JSONResponse({**error_body(msg, field), "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException):
        d = exc.detail
        body = error_body(d.get("message", ""), d.get("field"), d.get("type", "invalid_request_error")) \
            if isinstance(d, dict) else error_body(str(d))
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


def _endpoint(request: Request) -> str:
    """Route template (e.g. /v1/documents/{doc_id}) so metric labels stay bounded."""
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match.name == "FULL":
            return getattr(route, "path", request.url.path)
    return "other"
