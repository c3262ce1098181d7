"""The async engine serves concurrent callers and aborts cleanly."""

from __future__ import annotations

import asyncio

import pytest

from inference import AsyncEngine, SamplingParams


@pytest.fixture(scope="module")
def aengine(llm):
    # share the session engine's weights and pool instead of loading a second copy
    eng = AsyncEngine.from_engine(llm.engine)
    yield eng
    eng.shutdown()


def test_concurrent_streams_match_hf(aengine, hf_greedy, prompts, greedy):
    expected = [hf_greedy(p, 8) for p in prompts]

    async def consume(p):
        chunks = []
        async for out in aengine.add_request(p, greedy(8)):
            chunks.append(out)
        return chunks

    async def main():
        return await asyncio.gather(*(consume(p) for p in prompts))

    results = asyncio.run(main())
    for chunks, want in zip(results, expected, strict=True):
        assert chunks[-1].finished and chunks[-1].token_ids == want
        assert len(chunks) >= 2  # streamed incrementally
        assert "".join(c.outputs[0].delta_text for c in chunks) == chunks[-1].text
    assert aengine.stats()["running"] == 0


def test_abort_and_early_exit(aengine, prompts):
    async def main():
        it = aengine.add_request(prompts[2], SamplingParams(temperature=0.0, max_tokens=200), request_id="victim")
        first = await it.__anext__()
        assert not first.finished
        assert aengine.abort("victim")
        rest = [o async for o in it]
        leaver = aengine.add_request(prompts[1], SamplingParams(temperature=0.0, max_tokens=200))
        async for _ in leaver:
            break
        await leaver.aclose()  # leaving early aborts the request
        with pytest.raises(ValueError, match="max_model_len"):  # bad requests fail in the caller
            aengine.add_request([7] * (aengine.engine.max_model_len + 5))
        for _ in range(400):  # aborts are applied by the stepping thread before its next step
            if not aengine.engine.requests:
                break
            await asyncio.sleep(0.05)
        return rest

    rest = asyncio.run(main())
    assert all(not o.finished for o in rest)
    s = aengine.stats()
    assert s["running"] == 0 and s["waiting"] == 0 and s["kv_blocks_used"] == 0
