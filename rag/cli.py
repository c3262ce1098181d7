"""`rag` command line: one sub-module per command group under `rag/commands/`."""

from __future__ import annotations

import argparse
import os
import sys

from .config_loader import ConfigError

# Command groups in the order `rag --help` lists them; each module exposes register(subparsers).
COMMANDS = ("index", "docs", "chunk", "search", "reindex", "ask", "serve", "eval", "rerank", "embed", "config", "models", "doctor")


class CommandImportError(RuntimeError):
    """A command module failed to import (raised, never skipped)."""


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="pipeline YAML (default: embedded defaults)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config value by dotted key, e.g. --set retrieval.fusion.k=30 (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="rag", description="Index documents, search them, answer with citations.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        # A command module imports only argparse-level code (stages load lazily in its handlers),
        # so an ImportError here is a bug: raise it, naming the command, never skip the command.
        try:
            mod = importlib.import_module(f"rag.commands.{name}")
        except ImportError as e:
            raise CommandImportError(f"command {name!r} is broken: {e}") from e
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
