"""OpenAI-compatible /v1/chat/completions, /v1/completions and /v1/models on the same engine.

`rag: true` on a chat request answers the last user message from the index instead, and adds a
`rag` object (citations, passages) beside the usual fields, so existing clients keep working.
Earlier user/assistant turns make it a chat turn (`rag.chat`): the follow-up is condensed into the
standalone query searched (`rag.standalone_query`), and the prompt extends the previous turn's.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from jinja2 import TemplateError

from inference.errors import ContextOverflow, EmptyPrompt

from ..answer import Answer
from ..prompt import PromptTooLong
from .deps import (
    bad,
    check_collection,
    check_max_tokens,
    check_question,
    get_state,
    parse_filters,
    ready_pipeline,
)
from .errors import InvalidRequest, LimitError
from .schemas import ChatRequest, CompletionRequest

router = APIRouter(tags=["openai"])


def _params(st, req, tokenizer, default_max: int = 256) -> Any:
    from inference.sampling_params import SamplingParams

    max_tokens = req.max_completion_tokens or req.max_tokens
    check_max_tokens(st, max_tokens, "max_tokens")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    procs = []
    fmt = getattr(req, "response_format", None)
    if fmt:
        kind = fmt.get("type")
        if kind == "json_schema":
            from inference.structured import JsonSchemaLogitsProcessor, SchemaError

            schema = (fmt.get("json_schema") or {}).get("schema")
            try:
                procs.append(JsonSchemaLogitsProcessor(schema, tokenizer))
            except (SchemaError, TypeError, ValueError) as e:
                raise bad("response_format.json_schema.schema", str(e)) from None
        elif kind != "text":
            raise bad("response_format.type", f"{kind!r} is not supported; use 'json_schema' or 'text'")
    max_tokens = max_tokens or min(default_max, st.server.max_tokens_limit)
    for proc in procs:
        proc.max_tokens = max_tokens  # close the JSON before the budget runs out
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=req.top_p or 1.0, stop=stop, seed=req.seed,
        presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
        logits_processors=procs)


def _usage(out) -> dict:
    m = out.metrics
    return {"prompt_tokens": m.prompt_tokens, "completion_tokens": m.generated_tokens,
            "total_tokens": m.prompt_tokens + m.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": m.cached_prompt_tokens}}


def _chunk(cid: str, model: str, obj: str, choice: dict) -> str:
    body = {"id": cid, "object": obj, "created": int(time.time()), "model": model, "choices": [choice]}
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


@router.get("/v1/models")
async def models(request: Request):
    st = get_state(request)
    return {"object": "list", "data": [{"id": st.server.model_name, "object": "model", "created": 0,
                                        "owned_by": "ragstack"}]}


@router.post("/v1/chat/completions")
async def chat(req: ChatRequest, request: Request):
    st = get_state(request)
    pipe = ready_pipeline(request)
    model = req.model or st.server.model_name
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    if req.rag:
        return await _rag_chat(st, pipe, req, model, cid)
    tok = pipe.generator.tokenizer
    messages = [{"role": m.role if m.role != "developer" else "system", "content": m.text()} for m in req.messages]
    try:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except TemplateError as e:  # the model's template rejects this conversation (roles, order)
        raise bad("messages", f"the chat template rejected the messages: {e}") from None
    ids = tok.encode(text, add_special_tokens=False)
    params = _params(st, req, tok)
    return await _generate(st, pipe, ids, params, req.stream, cid, model, chat=True)


@router.post("/v1/completions")
async def completions(req: CompletionRequest, request: Request):
    st = get_state(request)
    pipe = ready_pipeline(request)
    model = req.model or st.server.model_name
    prompts = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
    if not prompts:
        raise bad("prompt", "must not be empty")
    if req.stream and len(prompts) > 1:
        raise bad("prompt", "streaming takes a single prompt")
    params = _params(st, req, pipe.generator.tokenizer, default_max=16)
    cid = f"cmpl-{uuid.uuid4().hex}"
    if req.stream:
        return await _generate(st, pipe, prompts[0], params, True, cid, model, chat=False)
    choices, usage = [], {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for i, p in enumerate(prompts):
        body = await _generate(st, pipe, p, params, False, cid, model, chat=False)
        c = body["choices"][0]
        c["index"] = i
        if req.echo:
            c["text"] = p + c["text"]
        choices.append(c)
        for k in usage:
            usage[k] += body["usage"][k]
    return {"id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage}


async def _generate(st, pipe, prompt, params, stream: bool, cid: str, model: str, chat: bool):
    obj = "chat.completion.chunk" if chat else "text_completion"
    await st.admission.__aenter__()
    try:
        agen = pipe.generator.astream(prompt, params, request_id=cid + uuid.uuid4().hex[:6])
    except (ContextOverflow, EmptyPrompt) as e:
        await st.admission.__aexit__(None, None, None)
        field = "messages" if chat else "prompt"
        err = LimitError if isinstance(e, ContextOverflow) else InvalidRequest
        raise err(f"{field}: {e}", field) from None
    if not stream:
        last = None
        try:
            async for out in agen:
                last = out
        finally:
            await st.admission.__aexit__(None, None, None)
        o = last.outputs[0]
        choice = ({"index": 0, "message": {"role": "assistant", "content": o.text}, "finish_reason": o.finish_reason}
                  if chat else {"index": 0, "text": o.text, "finish_reason": o.finish_reason, "logprobs": None})
        return {"id": cid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": model, "choices": [choice], "usage": _usage(last)}

    async def events():
        try:
            if chat:
                yield _chunk(cid, model, obj, {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None})
            async for out in agen:
                o = out.outputs[0]
                if o.delta_text:
                    piece = {"content": o.delta_text} if chat else None
                    choice = ({"index": 0, "delta": piece, "finish_reason": None} if chat
                              else {"index": 0, "text": o.delta_text, "finish_reason": None})
                    yield _chunk(cid, model, obj, choice)
                if out.finished:
                    end = ({"index": 0, "delta": {}, "finish_reason": o.finish_reason} if chat
                           else {"index": 0, "text": "", "finish_reason": o.finish_reason})
                    yield _chunk(cid, model, obj, end)
            yield "data: [DONE]\n\n"
        finally:
            await agen.aclose()
            await st.admission.__aexit__(None, None, None)

    return StreamingResponse(events(), media_type="text/event-stream")


async def _rag_chat(st, pipe, req: ChatRequest, model: str, cid: str):
    msgs = [(m.role, m.text()) for m in req.messages if m.role in ("user", "assistant")]
    try:
        history, question = st.chat.history(msgs)
    except ValueError as e:
        raise bad("messages", str(e)) from None
    check_question(st, question, "messages")
    check_max_tokens(st, req.max_tokens, "max_tokens")
    mode = req.rag.mode if not isinstance(req.rag, bool) else None
    sampling = {k: v for k, v in (("max_tokens", req.max_tokens), ("temperature", req.temperature), ("mode", mode))
                if v is not None}
    filters = parse_filters(req.filters)
    check_collection(pipe, req.collection)
    await st.admission.__aenter__()
    gen = pipe.astream(question, filters=filters, collection=req.collection, request_id=cid, history=history,
                       **sampling)

    def extra(a: Answer) -> dict:
        st.chat.remember(msgs, a)  # the next turn's prompt shows this one's passages again
        chat = {"standalone_query": a.question, "condense": "none", **a.chat}
        # generator_model: the engine's model (`auto` resolved), not the `model` id clients send
        return {"citations": [c.__dict__ for c in a.citations], "passages": [p.__dict__ for p in a.passages],
                "closest_passages": [p.__dict__ for p in a.closest_passages], "refused": a.refused,
                "timings_ms": a.timings_ms, "tokens": a.tokens, "mode": a.mode,
                # an answer made of other answers: each part's question and answer (`rag/answering/`)
                "comparison": a.comparison, "two_hop": a.two_hop,
                "generator_model": pipe.cfg.generator.engine.model, **chat}

    if not req.stream:
        answer = None
        try:
            async for item in gen:
                if isinstance(item, Answer):
                    answer = item
        except PromptTooLong as e:
            raise LimitError(f"messages: {e}", "messages") from None
        finally:
            await st.admission.__aexit__(None, None, None)
        usage = {"prompt_tokens": answer.tokens.get("prompt", 0), "completion_tokens": answer.tokens.get("completion", 0)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        usage["prompt_tokens_details"] = {"cached_tokens": answer.tokens.get("cached", 0)}
        return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                             "finish_reason": answer.finish_reason or "stop"}],
                "usage": usage, "rag": extra(answer)}

    async def events():
        obj = "chat.completion.chunk"
        try:
            yield _chunk(cid, model, obj, {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None})
            async for item in gen:
                if isinstance(item, Answer):
                    body = {"id": cid, "object": obj, "created": int(time.time()), "model": model,
                            "choices": [{"index": 0, "delta": {}, "finish_reason": item.finish_reason or "stop"}],
                            "rag": extra(item)}
                    yield f"data: {json.dumps(body, ensure_ascii=False, default=str)}\n\n"
                else:
                    yield _chunk(cid, model, obj, {"index": 0, "delta": {"content": item}, "finish_reason": None})
            yield "data: [DONE]\n\n"
        finally:
            await gen.aclose()
            await st.admission.__aexit__(None, None, None)

    return StreamingResponse(events(), media_type="text/event-stream")
