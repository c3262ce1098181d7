"""Shared helpers of the route modules."""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException, Request

from .state import ServerState


def get_state(request: Request) -> ServerState:
    return request.app.state.rag


def ready_pipeline(request: Request) -> Any:
    st = get_state(request)
    if not st.ready or st.pipeline is None:
        msg = st.load_error or "models are still loading"
        raise HTTPException(503, detail={"message": msg, "type": "unavailable"},
                            headers={"Retry-After": str(st.server.retry_after_s)})
    return st.pipeline


def bad(field: str, message: str, status: int = 422) -> HTTPException:
    return HTTPException(status, detail={"message": f"{field}: {message}", "field": field})


def check_max_tokens(st: ServerState, value: int | None, field: str) -> None:
    if value is not None and value > st.server.max_tokens_limit:
        raise bad(field, f"{value} exceeds the server limit of {st.server.max_tokens_limit}")


def check_question(st: ServerState, question: str, field: str = "question") -> None:
    limit = st.cfg.answer.max_question_chars
    if not question.strip():
        raise bad(field, "must not be empty")
    if len(question) > limit:
        raise bad(field, f"has {len(question)} characters; the limit is {limit}", 413)


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def observe_stages(st: ServerState, timings_ms: dict[str, float]) -> None:
    for stage, ms in timings_ms.items():
        st.registry.stages.observe(ms / 1000.0, stage)
