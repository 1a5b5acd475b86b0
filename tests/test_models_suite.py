"""The models suite (src/kernelwright/suite/models): real architectures built by
transformers, diffusers, torchvision and timm from their configs with random weights. Every
file imports (with or without its library), builds and runs at its small size, builds at its
full size on the meta device, and some of them match eager through kernelwright.compile. A
problem whose library does not import here is skipped with the import's error (torchvision's
wheel, built for a CUDA torch, raises a RuntimeError beside a CPU-only torch; timm imports
torchvision)."""

import copy
import functools
import importlib
import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import check

import kernelwright
from kernelwright.harness import problems
from kernelwright.suite.models._library import require

SUITE = Path(__file__).resolve().parents[1] / "src" / "kernelwright" / "suite" / "models"
PROBLEMS = problems.discover(SUITE)
NAMES = [p.name for p in PROBLEMS]


def library(problem) -> str:
    """The package a problem's model comes from (the one its file says it needs)."""
    return re.search(r"require\(\"(\w+)\"\)", Path(problem.path).read_text()).group(1)


@functools.cache
def import_failure(lib: str) -> str | None:
    """Why `import lib` fails here (not installed, or installed but broken), None if it works."""
    try:
        importlib.import_module(lib)
    except (ImportError, RuntimeError) as exc:
        return f"{lib} does not import: {type(exc).__name__}: {exc}"
    return None


def skip_unless_importable(problem) -> None:
    """Skip the test, giving the import's error, when the problem's library does not import."""
    reason = import_failure(library(problem))
    if reason is not None:
        pytest.skip(reason)


def test_suite_is_discovered_apart_from_the_levels():
    assert len(PROBLEMS) >= 6
    assert all(p.level == 0 for p in PROBLEMS)
    bundled = {p.name for p in problems.discover(SUITE.parent)}
    assert not any(name.startswith("models/") for name in bundled)


@pytest.mark.parametrize("problem", PROBLEMS, ids=NAMES)
def test_file_imports_without_its_library(problem, monkeypatch):
    """Without its library the file still loads; building Model says what is missing."""
    lib = library(problem)
    assert lib in ("transformers", "diffusers", "torchvision", "timm")
    for name in [n for n in sys.modules if n == lib or n.startswith(lib + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, lib, None)  # makes `import <lib>` fail
    loaded = problems.load(problem, "small")
    with pytest.raises(problems.ProblemError, match=f"needs the {lib} package"):
        problems.call_user("reference", lambda: loaded.build_model(0))


def test_require_counts_a_package_that_fails_to_import_as_missing(tmp_path, monkeypatch):
    """A package that is installed but raises on import (torchvision beside a torch it was
    not built for) is reported as the problem's missing package, naming the error."""
    (tmp_path / "kw_broken_package.py").write_text(
        "raise RuntimeError('operator kw::op does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="needs the kw_broken_package package.*"
                                          "RuntimeError: operator kw::op does not exist"):
        require("kw_broken_package")


@pytest.mark.parametrize("problem", PROBLEMS, ids=NAMES)
def test_small_size_runs(problem):
    skip_unless_importable(problem)
    loaded = problems.load(problem, "small")
    model = loaded.build_model(0)
    assert not model.training
    with torch.no_grad():
        out = model(*loaded.inputs(0))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out.shape[0] == loaded.module.batch_size
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("problem", PROBLEMS, ids=NAMES)
def test_full_size_builds_on_meta(problem):
    """The full size's model and inputs are made on the meta device: nothing allocated."""
    skip_unless_importable(problem)
    loaded = problems.load(problem, "full")
    with torch.device("meta"):
        model = loaded.model_class(*loaded.init_inputs())
        inputs = loaded.module.get_inputs()
    params = list(model.parameters())
    assert all(p.is_meta for p in params) and all(x.is_meta for x in inputs)
    assert sum(p.numel() for p in params) > 5_000_000  # the real config, not the tiny one


@pytest.mark.parametrize("name", ["001_llama", "003_bert", "008_unet2d_condition",
                                  "010_resnet50", "011_mobilenet_v3", "012_efficientnet_b0",
                                  "013_vit_b_16", "014_swin_t", "015_convnext_tiny",
                                  "016_vit_small"])
def test_small_size_matches_eager(name):
    problem = PROBLEMS[NAMES.index(name)]
    skip_unless_importable(problem)
    loaded = problems.load(problem, "small")
    check(loaded.build_model(0), *loaded.inputs(0), atol=1e-4, rtol=1e-4)


def test_whisper_decoder_steps_carry_the_cache():
    """Three successive decode steps of the Whisper decoder through the compiled module,
    its self-attention cache carried on the GPU from step to step (state), each step's
    logits and the cache after it matching eager running the same wrapper."""
    problem = PROBLEMS[NAMES.index("009_whisper_decoder_step")]
    skip_unless_importable(problem)
    loaded = problems.load(problem, "small")
    model = loaded.build_model(0)
    eager = copy.deepcopy(model)  # its own cache: running it changes its buffers
    module = loaded.module
    start = module.prompt
    compiled = kernelwright.compile(model, [torch.zeros(module.batch_size, 1, dtype=torch.long),
                                            torch.tensor([start])])
    assert {f"self_keys_{i}" for i in range(module.layers)} <= set(compiled.state())
    generator = torch.Generator().manual_seed(1)
    for step in range(3):
        tokens = torch.randint(0, module.vocab, (module.batch_size, 1), generator=generator)
        position = torch.tensor([start + step])
        got = compiled(tokens, position)
        with torch.no_grad():
            want = eager(tokens, position)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        state = compiled.state()
        for name in ("self_keys_0", "self_values_1"):
            torch.testing.assert_close(state[name], getattr(eager, name), atol=1e-4, rtol=1e-4)
