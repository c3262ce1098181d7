"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cli import add_config_args
from ..config import RagConfig, load_config


def command(sub: Any, name: str, help: str, func: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    add_config_args(p)
    p.set_defaults(func=func)
    return p


def config_from(args: argparse.Namespace) -> RagConfig:
    """The command's config; a command run with `--no-progress` also silences the libraries' own bars."""
    if getattr(args, "no_progress", False):
        from ._progress import silence_library_bars

        silence_library_bars()
    return load_config(args.config, args.overrides)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, ensure_ascii=False, indent=2, default=str)
    sys.stdout.write("\n")
