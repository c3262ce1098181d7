"""`rag serve`: the REST server (FastAPI + uvicorn) on one shared engine."""

from __future__ import annotations

import argparse

from ._common import command, config_from


def register(sub) -> None:
    p = command(sub, "serve", "run the REST question-answering server", run)
    p.add_argument("--host", help="default: server.host (127.0.0.1)")
    p.add_argument("--port", type=int, help="default: server.port (8000)")
    p.add_argument("--replicas", type=int, default=1,
                   help="worker processes on the port, one engine each (share state through storage.backend: postgres)")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..server.app import create_app

    cfg = config_from(args)
    host = args.host or cfg.server.host
    port = args.port if args.port is not None else cfg.server.port
    if args.replicas > 1:
        from ..server.replicas import run_replicas

        if cfg.storage.backend != "postgres":
            print("warning: replicas on the sqlite backend each build their own indexes; "
                  "use storage.backend: postgres to share them")
        print(f"serving {args.replicas} replicas on http://{host}:{port}")
        run_replicas(args.config, args.overrides, host, port, args.replicas, cfg.server.shutdown_grace_s)
        return 0
    app = create_app(cfg, console_progress=True)  # index rebuilds draw a bar here and show in /ready
    print(f"serving on http://{host}:{port}  (docs: /docs, chat page: /)")
    uvicorn.run(app, host=host, port=port, log_level="info",
                timeout_graceful_shutdown=int(cfg.server.shutdown_grace_s) or None)
    return 0
