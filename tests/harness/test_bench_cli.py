"""The command line around the harness: subcommands, filters, default size, progress."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from kernelwright.cli import main as cli
from kernelwright.cli import options
from kernelwright.harness import command, gpu
from kernelwright.harness.problems import Problem
from kernelwright.harness.progress import Progress


def test_bench_is_a_subcommand_and_others_can_join() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "some/suite", "--size", "full", "--loose", "--resume",
                              "--compile-ref", "--trials", "7", "--level", "2", "--only", "conv"])
    assert args.handler is command.run
    assert (args.suite, args.size, args.trials, args.level) == (Path("some/suite"), "full", 7, [2])
    assert args.only == ["conv"]
    assert args.loose and args.resume and args.compile_ref and args.out == Path("out/bench")
    assert cli.main([]) == 2


def test_filters() -> None:
    found = [Problem("level1/1_relu", Path("a"), 1), Problem("level2/3_conv_relu", Path("b"), 2),
             Problem("level2/4_linear", Path("c"), 2)]
    assert [p.name for p in options.select(found, ["conv"], None)] == ["level2/3_conv_relu"]
    assert [p.name for p in options.select(found, ["*relu"], None)] == [
        "level1/1_relu", "level2/3_conv_relu"]
    assert [p.name for p in options.select(found, ["level1/1_*", "linear"], None)] == [
        "level1/1_relu", "level2/4_linear"]
    assert [p.name for p in options.select(found, None, [2])] == [
        "level2/3_conv_relu", "level2/4_linear"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the default without CUDA")
def test_default_size_without_cuda_is_small() -> None:
    assert gpu.default_size()[0] == "small"


def test_the_quick_sample_is_of_the_bundled_suite_and_covers_every_level() -> None:
    from kernelwright.harness import problems

    found = problems.discover(options.bundled_suite())
    quick = command.quick_sample(found)
    assert sorted(p.name for p in quick) == sorted(command.QUICK)  # every name exists
    assert {p.level for p in quick} == {p.level for p in found}


def test_the_sample_is_quick_only_without_a_hardware_gpu_and_named_problems(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parser = cli.build_parser()
    monkeypatch.setattr(gpu, "no_hardware_gpu", lambda: "software GPU driver (llvmpipe)")
    assert command.default_sample(parser.parse_args(["bench"]))[0] == "quick"
    assert command.default_sample(parser.parse_args(["bench", "--all"])) == ("all", "asked")
    for named in (["some/suite"], ["--only", "conv"], ["--level", "2"]):
        assert command.default_sample(parser.parse_args(["bench", *named]))[0] == "all"
    monkeypatch.setattr(gpu, "no_hardware_gpu", lambda: None)
    assert command.default_sample(parser.parse_args(["bench"]))[0] == "all"
    assert command.default_sample(parser.parse_args(["bench", "--quick"])) == ("quick", "asked")


def test_bundled_suite_is_the_default() -> None:
    assert options.bundled_suite().name == "suite"
    assert options.bundled_suite().parent.name == "kernelwright"


def test_progress_lines() -> None:
    stream = io.StringIO()
    progress = Progress(3, stream, live=True)
    progress.start("level1/relu")
    progress.start("level1/bad")
    progress.running["level1/relu"] -= 3  # it started 3 s ago
    progress.tick(force=True)
    progress.finish({"name": "level1/relu", "correct": True, "speedup_eager": 1.5,
                     "compile_s": 0.25, "flags": []})
    progress.finish({"name": "level1/bad", "correct": False, "reason": "mismatch",
                     "error": "mismatch: trial 1 (normal): 3 of 64 elements", "flags": []})
    text = stream.getvalue()
    assert "level1/relu 3s  level1/bad 0s" in text and "\r" in text
    assert progress.running == {}
    lines = [line.split("\r\033[K")[-1] for line in text.split("\n")]
    assert "[1/3]" in lines[0] and "PASS" in lines[0] and "1.50x eager" in lines[0]
    assert "[2/3]" in lines[1] and "FAIL" in lines[1] and "mismatch: trial 1" in lines[1]
    quiet = io.StringIO()
    Progress(1, quiet, live=False).start("x")
    assert quiet.getvalue() == ""
