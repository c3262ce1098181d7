"""`rag` command line: one sub-module per command group under `rag/commands/`."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys

from .config_loader import ConfigError

# Command groups in the order `rag --help` lists them; each module exposes register(subparsers).
# A group is `rag/commands/<name>.py`, or a module another package plugs in through the PLUGINS
# entry-point group (`eval` -> eval/cli.py, see pyproject.toml), so the library never imports it.
COMMANDS = ("index", "docs", "chunk", "search", "reindex", "graph", "ask", "serve", "eval", "rerank", "embed", "config", "models", "doctor")

PLUGINS = "ragstack.commands"


class CommandImportError(RuntimeError):
    """A command module failed to import (raised, never skipped)."""


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="pipeline YAML (default: embedded defaults)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config value by dotted key, e.g. --set retrieval.fusion.k=30 (repeatable)",
    )


def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """Plugged-in command groups by name. Every distribution is read, not only the first of each
    name (`entry_points(group=)`): a stale `ragstack.egg-info` left in the checkout by a non-editable
    build comes first on `sys.path` and would hide the installed entry points."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == PLUGINS:
                found.setdefault(ep.name, ep)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag", description="Index documents, search them, answer with citations.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins = _plugins()
    for name in (*COMMANDS, *sorted(set(plugins) - set(COMMANDS))):
        # A command module imports only argparse-level code (stages load lazily in its handlers),
        # so an ImportError here is a bug: raise it, naming the command, never skip the command.
        try:
            mod = plugins[name].load() if name in plugins else importlib.import_module(f"rag.commands.{name}")
        except ImportError as e:
            hint = "" if name in plugins else (f" (nor does an installed package provide it as a {PLUGINS} "
                                               "entry point: reinstall with `make install`)")
            raise CommandImportError(f"command {name!r} is broken: {e}{hint}") from e
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
