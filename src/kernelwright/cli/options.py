"""The options that pick problems of a suite, shared by bench, tune and optimize.

`add_suite_options` defines `--size`, `--only` and `--level` once; `select` applies
`--only` and `--level`; `bundled_suite` is the default suite of every command.
"""

from __future__ import annotations

import argparse
import fnmatch
from pathlib import Path

SIZES = ("small", "full")
SIZE_HELP = ("problem sizes for files that define SIZES; default: small on a software GPU "
             "driver (bench: also without CUDA, which times the reference), else full")


def bundled_suite() -> Path:
    """The suite bundled with the package (src/kernelwright/suite)."""
    return Path(__file__).resolve().parents[1] / "suite"


def add_suite_options(parser: argparse.ArgumentParser) -> None:
    """Add --size, --only and --level to a command's parser."""
    parser.add_argument("--size", choices=SIZES, help=SIZE_HELP)
    parser.add_argument("--only", metavar="PATTERN", action="append",
                        help="only problems whose name matches this glob, or contains it "
                             "(repeatable: any of them)")
    parser.add_argument("--level", type=int, action="append",
                        help="only this level (repeatable)")


def select(problems: list, only: list[str] | None, levels: list[int] | None) -> list:
    """The problems of `levels` (all when None) that match any pattern of `only`."""
    chosen = problems
    if levels:
        chosen = [p for p in chosen if p.level in levels]
    if only:
        chosen = [p for p in chosen
                  if any(fnmatch.fnmatch(p.name, pattern) or pattern in p.name
                         for pattern in only)]
    return chosen
