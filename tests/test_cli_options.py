"""The suite-selection options: one definition (cli/options.py) in every command."""

from __future__ import annotations

import argparse

from kernelwright.cli import main as cli
from kernelwright.cli import options


def _suite_actions(parser: argparse.ArgumentParser) -> dict[str, tuple]:
    return {a.dest: (a.option_strings, a.choices, a.help, type(a).__name__)
            for a in parser._actions if a.dest in ("size", "only", "level")}


def test_every_command_takes_the_same_suite_options() -> None:
    reference = argparse.ArgumentParser()
    options.add_suite_options(reference)
    expected = _suite_actions(reference)
    assert set(expected) == {"size", "only", "level"}
    subparsers = next(a for a in cli.build_parser()._actions
                      if isinstance(a, argparse._SubParsersAction))
    assert set(subparsers.choices) == {"bench", "tune", "optimize"}
    for name, parser in subparsers.choices.items():
        assert _suite_actions(parser) == expected, name
        args = parser.parse_args(["--size", "small", "--only", "relu", "--level", "2"])
        assert (args.size, args.only, args.level) == ("small", ["relu"], [2]), name
