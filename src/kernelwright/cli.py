"""Command line: ``kernelwright COMMAND [ARGS]``.

Each subcommand lives in a module of its own that provides
``add_parser(subparsers)``; the parser it adds sets ``handler``, a function of the
parsed arguments that returns the exit code. To add a subcommand (``tune``,
``optimize``, ...), write its module and list it in SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import importlib

SUBCOMMANDS = [
    "kernelwright.harness.command",  # kernelwright bench
    "kernelwright.tune.command",  # kernelwright tune
    "kernelwright.optimize.command",  # kernelwright optimize
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelwright",
        description="Compile PyTorch modules into verified WGSL kernels, and measure them.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
