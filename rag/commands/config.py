"""`rag config show|check`: print the effective config (file + overrides + defaults) or validate it."""

from __future__ import annotations

import argparse

from ._common import add_config_args, config_from


def register(sub) -> None:
    p = sub.add_parser("config", help="show or check the effective pipeline config")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    for name, func, help in (("show", run_show, "print the effective config as YAML"),
                             ("check", run_check, "validate a config and exit non-zero on errors")):
        sp = csub.add_parser(name, help=help)
        add_config_args(sp)
        sp.set_defaults(func=func)


def run_show(args: argparse.Namespace) -> int:
    print(config_from(args).to_yaml(), end="")
    return 0


def run_check(args: argparse.Namespace) -> int:
    config_from(args)
    print("ok")
    return 0
