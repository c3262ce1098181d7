"""`rag doctor`: what the engine will run on this machine, and why.

Why a command: the fast paths depend on things a user cannot see from a config file (CPU flags,
whether the native GGUF kernels built and which ISA they picked, what `quantization: auto` turned
into). One place prints them all, so "why is it slow" starts from facts. Nothing is loaded but the
kernel library (no model weights).
"""

from __future__ import annotations

import argparse
from typing import Any

from ._common import command, config_from, print_json


def register(sub) -> None:
    p = command(sub, "doctor", "report CPU flags, GGUF kernel status and what quantization: auto resolves to", run)
    p.add_argument("--json", action="store_true")


def _kernels() -> dict[str, Any]:
    from inference.layers.gguf_linear import kernel_error, kernel_ops, type_name

    ops = kernel_ops()
    info: dict[str, Any] = {"available": ops is not None, "load_error": kernel_error()}
    if ops is None:
        return info
    for key, get in (("path", lambda: _library_path(ops)),
                     ("isa", ops.isa), ("supported_isas", lambda: list(ops.supported_isas())),
                     ("supported_types", lambda: sorted(type_name(t) for t in ops.SUPPORTED_TYPES)),
                     ("q4_k_interleaved_x8", ops.x8_enabled), ("tile_gemm_min_rows", lambda: _tile_rows(ops))):
        try:
            info[key] = get()
        except Exception as e:  # noqa: BLE001 - report what the library says, never crash the report
            info[key] = f"error: {type(e).__name__}: {e}"
    return info


def _tile_rows(ops: Any) -> dict[str, int]:
    """Per GGML type with an AMX tile GEMM on the active path, from how many activation rows it runs
    (the dispatch's own answer, `matmul_path`; empty off AMX or with RAG_TILE_MIN_ROWS=0)."""
    from inference.layers.gguf_linear import type_name

    out: dict[str, int] = {}
    for t in sorted(ops.SUPPORTED_TYPES):
        if ops.has_tile(t):
            m = next((m for m in range(1, 4097) if ops.matmul_path(t, m) == "tile_gemm"), None)
            if m is not None:
                out[type_name(t)] = m
    return out


def _library_path(ops: Any) -> str | None:
    """The shared library's path if the module exposes one (attribute or function), else the
    module's own file."""
    for name in ("library_path", "LIBRARY_PATH", "lib_path", "_LIB_PATH"):
        value = getattr(ops, name, None)
        if value is not None:
            return str(value() if callable(value) else value)
    return getattr(ops, "__file__", None)


def report(args: argparse.Namespace) -> dict[str, Any]:
    import os

    import torch

    from inference.cpu_features import ENGINE_FLAGS, cpu_flags, cpu_model
    from rag.generation.auto_model import AUTO, choose

    cfg = config_from(args)
    eng = cfg.generator.engine
    auto = None
    if eng.model == AUTO:  # what `auto` is here, from the speed cache (doctor never measures)
        choice = choose(eng, cfg.answer.latency_budget_s, measure=False, cfg=cfg)
        auto = {"model": choice.name, "reason": choice.reason}
        if choice.name is not None:
            eng.model = choice.name
    device = eng.resolved_device()
    flags = cpu_flags()
    out: dict[str, Any] = {
        "cpu": {"model": cpu_model(), "cores": os.cpu_count(),
                "flags": {f: f in flags for f in ENGINE_FLAGS}},
        "kernels": _kernels(),
        "env": {k: os.environ.get(k) for k in ("RAG_KERNEL_ISA", "RAG_CPU_ISA", "RAG_KERNEL_X8", "RAG_TILE_MIN_ROWS")},
        "torch": {"version": torch.__version__, "threads": torch.get_num_threads(),
                  "configured_threads": eng.num_threads},
        "engine": {"model": eng.model, "device": device, "quantization": eng.quantization, "dtype": eng.dtype},
    }
    if auto is not None:
        out["engine"]["auto"] = auto
    try:
        plan = eng.resolved_quantization(device)
        out["engine"].update(resolved_quantization=plan.mode, reason=plan.reason,
                             resolved_dtype=str(eng.resolved_dtype(device, plan)).removeprefix("torch."))
        if plan.warning:
            out["engine"]["warning"] = plan.warning
    except ValueError as e:
        out["engine"]["error"] = str(e)
    return out


def run(args: argparse.Namespace) -> int:
    data = report(args)
    if args.json:
        print_json(data)
        return 0
    cpu, k, t, e = data["cpu"], data["kernels"], data["torch"], data["engine"]
    print(f"cpu:          {cpu['model']} ({cpu['cores']} logical cores)")
    print("flags:        " + " ".join(f"{f}{'+' if on else '-'}" for f, on in cpu["flags"].items()))
    if k["available"]:
        print(f"kernels:      loaded from {k.get('path')}, ISA {k.get('isa')} "
              f"(supported: {', '.join(k.get('supported_isas') or [])})")
        print(f"              types: {', '.join(k.get('supported_types') or [])}; Q4_K rows interleaved by 8: "
              f"{'on' if k.get('q4_k_interleaved_x8') is True else 'off (RAG_KERNEL_X8=0)'}")
        tiles = k.get("tile_gemm_min_rows")
        if isinstance(tiles, dict) and tiles:
            print("              AMX tile GEMM from " + ", ".join(f"{n} rows ({t})" for t, n in tiles.items())
                  + "; the AVX-512 GEMMs below")
    else:
        print(f"kernels:      unavailable: {k['load_error']}")
    for key, value in data["env"].items():
        if value:
            print(f"env:          {key}={value}")
    print(f"torch:        {t['version']}, {t['threads']} threads"
          + (f" (engine.num_threads={t['configured_threads']})" if t["configured_threads"] else ""))
    print(f"model:        {e['model']} on {e['device']}")
    if "auto" in e:
        print(f"              (model auto → {e['auto']['reason']})")
    if "error" in e:
        print(f"quantization: {e['quantization']}: error: {e['error']}")
        return 1
    print(f"quantization: {e['quantization']} -> {e['resolved_quantization']} ({e['reason']})")
    print(f"dtype:        {e['dtype']} -> {e['resolved_dtype']}")
    if "warning" in e:
        print(f"warning:      {e['warning']}")
    return 0
