"""Command line: ``kernelwright COMMAND [ARGS]``.

Each subcommand lives in a module of its own that provides
``add_parser(subparsers)``; the parser it adds sets ``handler``, a function of the
parsed arguments that returns the exit code. To add a subcommand (``tune``,
``optimize``, ...), write its module and list it in SUBCOMMANDS. The options that
select problems of a suite are defined once, in options.py.
"""

from __future__ import annotations

import argparse

from ..harness import command as bench_command
from ..optimize import command as optimize_command
from ..tune import command as tune_command

SUBCOMMANDS = [
    bench_command,  # kernelwright bench
    tune_command,  # kernelwright tune
    optimize_command,  # kernelwright optimize
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelwright",
        description="Compile PyTorch modules into verified WGSL kernels, and measure them.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args) or 0)
