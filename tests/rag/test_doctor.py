"""`rag doctor`: the machine facts behind the engine's fast paths, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_doctor_json_reports_cpu_kernels_and_quantization():
    """Catches a doctor that crashes when the kernel library is missing, omits a flag the engine
    keys on, or reports a quantization mode the engine would not pick (it must be the engine's own
    decision, `EngineConfig.resolved_quantization`)."""
    from inference.config import EngineConfig
    from inference.cpu_features import ENGINE_FLAGS, cpu_flags, cpu_model

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "rag", "doctor", "--json", "--set", "generator.engine.model=smollm2"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["cpu"]["model"] == cpu_model()
    assert data["cpu"]["flags"] == {f: f in cpu_flags() for f in ENGINE_FLAGS}
    k = data["kernels"]
    assert isinstance(k["available"], bool)
    assert (k["load_error"] is None) == k["available"]
    if k["available"]:
        assert k["isa"] in k["supported_isas"] and k["path"]
        from inference.kernels import ops

        assert k["q4_k_interleaved_x8"] is ops.x8_enabled()  # what the layers will do here
        # the tile GEMM's row thresholds as the dispatch applies them (AMX CPUs; empty elsewhere)
        tiles = k["tile_gemm_min_rows"]
        if k["isa"] == "amx" and not os.environ.get("RAG_TILE_MIN_ROWS"):
            assert tiles == {"Q4_K": 32, "Q5_K": 32, "Q6_K": 64}
        elif k["isa"] != "amx":
            assert tiles == {}
    plan = EngineConfig(model="smollm2").resolved_quantization("cpu")
    eng = data["engine"]
    assert eng["quantization"] == "auto" and eng["resolved_quantization"] == plan.mode
    assert eng["reason"] == plan.reason
    assert data["torch"]["version"] and data["torch"]["threads"] >= 1


def test_doctor_text_names_an_impossible_request(capsys):
    """Catches `quantization: gguf` on a safetensors model being reported as fine: the text report
    prints the refusal and exits non-zero."""
    from rag.cli import main

    code = main(["doctor", "--set", "generator.engine.model=/nonexistent/hf-dir", "--set",
                 "generator.engine.quantization=gguf"])
    out = capsys.readouterr().out
    assert code == 1
    assert "cpu:" in out and "kernels:" in out and "torch:" in out
    assert "quantization: gguf: error: quantization: gguf needs a GGUF model" in out
