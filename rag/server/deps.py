"""Shared helpers of the route modules: readiness, request checks, SSE framing."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from retrieval.filters import Filters

from .errors import FilterError, InvalidRequest, LimitError, NotFound, NotReady
from .state import ServerState


def get_state(request: Request) -> ServerState:
    return request.app.state.rag


def ready_pipeline(request: Request) -> Any:
    st = get_state(request)
    if not st.ready or st.pipeline is None:
        raise NotReady(st.load_error or st.progress.reason() or "models are still loading", None,
                       {"Retry-After": str(st.server.retry_after_s)})
    return st.pipeline


def bad(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {message}", field)


def check_max_tokens(st: ServerState, value: int | None, field: str) -> None:
    if value is not None and value > st.server.max_tokens_limit:
        raise bad(field, f"{value} exceeds the server limit of {st.server.max_tokens_limit}")


def check_question(st: ServerState, question: str, field: str = "question") -> None:
    limit = st.cfg.answer.max_question_chars
    if not question.strip():
        raise bad(field, "must not be empty")
    if len(question) > limit:
        raise LimitError(f"{field}: has {len(question)} characters; the limit is {limit}", field)


def check_collection(pipe: Any, name: str | None, field: str = "collection") -> None:
    """A named collection must exist (in the store or the config): searching a misspelt one would
    quietly return nothing, the #1 confusion of new users."""
    if not name:
        return
    known = set(pipe.store.collections()) | {c.name for c in pipe.cfg.retrieval.collections}
    if name not in known:
        listing = ", ".join(sorted(known)) or "none yet"
        raise NotFound(f"{field}: no collection {name!r}; collections: {listing}", field)


def parse_filters(spec: Any, field: str = "filters") -> Filters | None:
    """Parse request filters at the boundary, so a bad filter is a 422 on `filters` before any
    work starts (the retriever accepts the parsed object as is)."""
    if spec is None:
        return None
    try:
        return Filters.parse(spec)
    except (ValueError, TypeError) as e:
        raise FilterError(f"{field}: {e}", field) from None


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def observe_stages(st: ServerState, timings_ms: dict[str, float]) -> None:
    for stage, ms in timings_ms.items():
        st.registry.stages.observe(ms / 1000.0, stage)
