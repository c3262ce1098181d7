"""POST /v1/ask (JSON or Server-Sent Events) and POST /v1/search."""

from __future__ import annotations

import asyncio
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ..answer import Answer
from ..prompt import PromptTooLong
from .deps import (
    check_collection,
    check_max_tokens,
    check_question,
    get_state,
    observe_stages,
    parse_filters,
    ready_pipeline,
    sse,
)
from .errors import LimitError
from .schemas import AskRequest, SearchRequest

router = APIRouter(tags=["rag"])


def _sampling(req: AskRequest) -> dict:
    o = req.options
    return {k: v for k, v in (("max_tokens", o.max_tokens), ("temperature", o.temperature), ("seed", o.seed),
                              ("mode", req.mode)) if v is not None}


def _answer_json(answer: Answer, passages: bool) -> dict:
    return answer.to_dict(passages=passages)


@router.post("/v1/ask", summary="Answer a question from the index, with citations (stream: SSE)")
async def ask(req: AskRequest, request: Request):
    st = get_state(request)
    pipe = ready_pipeline(request)
    check_question(st, req.question)
    check_max_tokens(st, req.options.max_tokens, "options.max_tokens")
    filters = parse_filters(req.filters)
    check_collection(pipe, req.collection)
    rid = f"ask-{uuid.uuid4().hex}"
    gen = pipe.astream(req.question, filters=filters, collection=req.collection, k=req.top_k,
                       request_id=rid, **_sampling(req))
    await st.admission.__aenter__()
    try:
        first = await _first(gen)
    except BaseException:
        await st.admission.__aexit__(None, None, None)
        raise
    if not req.stream:
        try:
            answer = first if isinstance(first, Answer) else None
            async for item in gen:
                if isinstance(item, Answer):
                    answer = item
        finally:
            await st.admission.__aexit__(None, None, None)
        observe_stages(st, answer.timings_ms)
        return _answer_json(answer, req.options.passages)

    async def events():
        try:
            item = first
            while True:
                if isinstance(item, Answer):
                    observe_stages(st, item.timings_ms)
                    yield sse("final", _answer_json(item, req.options.passages))
                    break
                yield sse("delta", {"text": item})
                item = await gen.__anext__()
        finally:
            await gen.aclose()  # a disconnect lands here: the engine request is aborted
            await st.admission.__aexit__(None, None, None)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Request-Id": rid})


async def _first(gen):
    """Run up to the first delta so a prompt that cannot fit becomes a 413 before streaming starts.

    Filters and the question were checked before; anything else raised here is a server bug and
    goes to the app's 500 handler.
    """
    try:
        return await gen.__anext__()
    except PromptTooLong as e:
        raise LimitError(f"question: {e}", "question") from None


@router.post("/v1/search", summary="Retrieval only: ranked chunks with scores and metadata")
async def search(req: SearchRequest, request: Request):
    st = get_state(request)
    pipe = ready_pipeline(request)
    check_question(st, req.query, "query")
    filters = parse_filters(req.filters)
    check_collection(pipe, req.collection)
    if req.mode == "global":
        return {"mode": "global", "communities": await asyncio.to_thread(_global, pipe, req)}
    if req.mode:  # one retriever mode, no plan or reranking: a blocking call in a worker thread
        res = await asyncio.to_thread(_search_mode, pipe, req, filters)
    else:  # the pipeline's search, awaited here: its LLM stages run on this loop, its retrieval in threads
        res = await pipe.asearch(req.query, filters=filters, collection=req.collection, k=req.top_k)
    observe_stages(st, res.timings_ms)
    out = res.to_dict()
    for r, c in zip(out["results"], res.candidates):
        r["ranks"], r["scores"] = dict(c.ranks), {k: float(v) for k, v in c.scores.items()}
    return out


def _global(pipe, req: SearchRequest) -> list[dict]:
    with pipe.lock:
        return pipe.retriever.global_search(req.query, req.top_k, req.collection)


def _search_mode(pipe, req: SearchRequest, filters):
    with pipe.lock:
        return pipe.retriever.search(req.query, k=req.top_k, mode=req.mode, filters=filters,
                                     collection=req.collection)
