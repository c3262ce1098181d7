"""One-call GPU check for a session that is lent a device: CUDA attention, CUDA graphs, engine bench.

The device machine has torch, transformers and triton but not our model package, and only 64 MiB
travel with the tree, so the check builds a random-weight model of SmolLM2-135M's exact shape from
its config and tokenizer (carried in a folder) and compares the engine's CUDA paths with each other
and with HF transformers on the same weights. Outputs go to `--out` as JSON.

Here (once):  python bench/device_check.py --prepare .device   (and `echo /.device/ >> .git/info/exclude`)
There (carry [".device"]):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .device/whl/*.whl &&
    PYTHONPATH=/tmp/site python3 bench/device_check.py --assets .device --out $OUT
The device image lacks only pydantic (and its three helpers) among our imports; `--prepare` fetches
their wheels for its Python 3.12.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEVICE_WHEELS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection")
ASSETS = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def copy_present(names: tuple[str, ...], src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (src / name).exists():
            shutil.copy2(src / name, dest / name)


def prepare(dest: Path) -> None:
    from inference.model_loader import resolve_model_dir

    src = resolve_model_dir("smollm2")
    copy_present(ASSETS, src, dest)
    print(f"copied {', '.join(ASSETS)} from {src} to {dest}")
    from importlib.metadata import version

    pins = [f"{name}=={version(name)}" for name in DEVICE_WHEELS]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_17_x86_64",
                    "--platform", "manylinux2014_x86_64", "-d", str(dest / "whl"), *pins], check=True)
    print("wheels:", sorted(p.name for p in (dest / "whl").iterdir()))


def random_model(assets: Path, out: Path) -> Path:
    """SmolLM2-shaped weights from a fixed seed (std 0.02): deterministic, meaningless text."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if (out / "model.safetensors").exists():
        return out
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(assets))
    model.save_pretrained(out, safe_serialization=True)
    copy_present(ASSETS[1:], assets, out)
    return out


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    """A shared 300-token prefix plus 20-200 own tokens: exercises prefix hits and cascade decode."""
    import random

    rng = random.Random(seed)
    shared = [rng.randrange(100, 40000) for _ in range(300)]
    return [shared + [rng.randrange(100, 40000) for _ in range(rng.randint(20, 200))] for _ in range(n)]


def hf_greedy(model_dir: Path, batch: list[list[int]], max_new: int, device: str) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    outs = []
    with torch.inference_mode():
        for p in batch:
            ids = torch.tensor([p], device=device)
            g = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                            min_new_tokens=max_new, do_sample=False, pad_token_id=0)
            outs.append(g[0, len(p):].tolist())
    return outs


def engine_greedy(model_dir: Path, batch: list[list[int]], max_new: int, device: str, dtype: str,
                  eager: bool = True) -> tuple[list[list[int]], dict, float]:
    import torch

    from inference import LLM, SamplingParams

    llm = LLM(str(model_dir), device=device, dtype=dtype, enforce_eager=eager, kv_cache_memory=4.0)
    sp = SamplingParams(temperature=0.0, max_tokens=max_new, ignore_eos=True)
    llm.generate(batch[:1], sp)  # warm-up (and CUDA graph capture); leaves the shared prefix cached
    t = time.perf_counter()
    outs = [o.token_ids for o in llm.generate(batch, sp)]
    if device == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t
    stats = llm.stats()
    del llm
    return outs, stats, secs


def agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    """Exact matches, and where the first divergence falls (fp noise can flip a near-tie late)."""
    first = []
    for x, y in zip(a, b, strict=True):
        d = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)
        first.append(d)
    return {"identical": sum(d is None for d in first), "of": len(first),
            "first_divergence": [d for d in first if d is not None]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepare", type=Path, help="copy config + tokenizer of the packaged model here and exit")
    ap.add_argument("--assets", type=Path, default=Path(".device"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/out")))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: dry run of this script")
    ap.add_argument("--requests", type=int, default=16, help="parity prompts")
    ap.add_argument("--bench-requests", type=int, default=64, help="bench/engine.py requests (0: skip)")
    args = ap.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if args.device == "cuda":
        from inference.layers.cuda_attention import select_backend

        backend = select_backend()
        report.update(gpu=torch.cuda.get_device_name(0), attention_backend=getattr(backend, "__name__", "torch"))
    model_dir = random_model(args.assets, Path("/tmp/device_check_model"))
    batch = prompts(args.requests)
    ref = hf_greedy(model_dir, batch, 32, args.device)
    runs = {}
    for name, dtype, eager in (("fp32_eager", "float32", True), ("bf16_eager", "bfloat16", True),
                               ("bf16_cuda_graphs", "bfloat16", False)):
        if not eager and args.device != "cuda":
            continue
        outs, stats, secs = engine_greedy(model_dir, batch, 32, args.device, dtype, eager)
        runs[name] = outs
        report[name] = {"vs_hf_fp32": agreement(outs, ref), "seconds": round(secs, 3),
                        "prefix_cache_hit_rate": stats.get("prefix_cache_hit_rate"),
                        "kv_blocks_in_use_after": stats.get("kv_blocks_used")}
        print(name, report[name], flush=True)
    if "bf16_cuda_graphs" in runs:
        report["cuda_graphs_vs_eager_bf16"] = agreement(runs["bf16_cuda_graphs"], runs["bf16_eager"])
    try:
        import faiss

        report["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    except ImportError:
        report["faiss_gpus"] = "faiss not installed"
    (args.out / "device_check.json").write_text(json.dumps(report, indent=2))
    if args.bench_requests:
        for extra, tag in (([], "eager"), (["--cuda-graphs"], "graphs")):
            if tag == "graphs" and args.device != "cuda":
                continue
            cmd = [sys.executable, str(Path(__file__).with_name("engine.py")), "--model", str(model_dir),
                   "--device", args.device, "--dtype", "bfloat16", "--hf-dtype", "bfloat16",
                   "--requests", str(args.bench_requests), "--json", str(args.out / f"bench_{tag}.json"), *extra]
            r = subprocess.run(cmd, capture_output=True, text=True)
            print(r.stdout[-1500:], r.stderr[-1500:] if r.returncode else "", flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
