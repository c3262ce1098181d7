"""Request guards: body size, API keys, draining, per-endpoint metrics.

Errors raised here are rendered with `errors.error_response` (middleware sits outside the app's
exception handlers, so it cannot raise them); the statuses still come from the typed classes.
"""

from __future__ import annotations

import json
import time

from fastapi import FastAPI, Request

from .errors import LimitError, NotReady, Unauthorized, error_body, error_response
from .state import ServerState

OPEN_EXACT = ("/health", "/ready", "/", "/openapi.json")
OPEN_PREFIX = ("/docs", "/static/")


class BodyLimit:
    """Rejects bodies over the limit with 413, by Content-Length or while streaming them in.

    A chunked body has no Content-Length, so the limit trips while the app reads it. The app (and
    the middleware between) may wrap our signal in an ExceptionGroup or turn it into anything
    else, so the decision is a flag, not an `except` on the exception type.
    """

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._reject(send)
        seen, tripped, started = 0, False, False

        async def limited():
            nonlocal seen, tripped
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    tripped = True
                    raise _TooLarge
            return msg

        async def tracked(message):
            nonlocal started
            if tripped and not started:
                return  # whatever the app makes of the interrupted read, the answer is 413
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, tracked)
        except BaseException:
            if not tripped:
                raise
        if tripped and not started:
            await self._reject(send)

    async def _reject(self, send):
        err = LimitError(f"request body exceeds {self.limit} bytes", "body")
        body = json.dumps(error_body(err.message, err.field, err.type_)).encode()
        await send({"type": "http.response.start", "status": err.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


def install(app: FastAPI, state: ServerState) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next):
        path = request.url.path
        t0 = time.perf_counter()
        keys = state.api_keys()
        if keys and path not in OPEN_EXACT and not path.startswith(OPEN_PREFIX):
            auth = request.headers.get("authorization", "")
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
            if token not in keys:
                state.registry.requests.inc("unauthenticated", "401")
                return error_response(Unauthorized("missing or invalid API key", "Authorization",
                                                   {"WWW-Authenticate": "Bearer"}))
        if state.draining and path.startswith("/v1/"):
            return error_response(NotReady("server is shutting down", None,
                                           {"Retry-After": str(state.server.retry_after_s)}))
        response = await call_next(request)
        endpoint = _endpoint(request)
        state.registry.requests.inc(endpoint, str(response.status_code))
        state.registry.latency.observe(time.perf_counter() - t0, endpoint)
        return response


def _endpoint(request: Request) -> str:
    """The matched route's template (e.g. `/v1/jobs/{job_id}`), read after routing so metric
    labels stay bounded: a path no route matched is `other`, never the raw path."""
    route = request.scope.get("route")
    return getattr(route, "path_format", None) or getattr(route, "path", None) or "other"
