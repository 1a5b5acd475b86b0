"""Problems: find and load KernelBench-format files.

A problem is one Python file that defines ``Model`` (an ``nn.Module``),
``get_inputs()`` and ``get_init_inputs()``. A suite is a folder of such files,
flat or nested by level (``level1/``, ``level2/``, ...); the level of a file is the
number in the nearest ``levelN`` folder above it, else 0. A KernelBench checkout
is a suite too: when any file lies under a ``levelN`` folder, only such files are
taken, so the checkout's own scripts are left alone.

Files may define ``SIZES = {"small": {...}, "full": {...}}``: dicts of
module-global overrides applied before ``get_init_inputs``/``get_inputs`` run.
Files without ``SIZES`` are used as they are.

`discover` hands a sorted list of `Problem` (name, path, level) to the runner;
`load` hands a `LoadedProblem` (the module's three names, sized) to the worker,
or raises `ProblemError` with the reason the file cannot be used.
"""

from __future__ import annotations

import importlib.util
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from .oom import reraise_oom

LEVEL_DIR = re.compile(r"^level[_-]?(\d+)$", re.IGNORECASE)
SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


class ProblemError(Exception):
    """A problem file that cannot be used; the message says why."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


@dataclass(frozen=True)
class Problem:
    """One problem file of a suite."""

    name: str  # path relative to the suite, without ".py", with "/" separators
    path: Path
    level: int


@dataclass
class LoadedProblem:
    """A problem's module with its sizes applied."""

    problem: Problem
    module: ModuleType
    size: str | None  # the SIZES entry applied, None when the file has none

    @property
    def model_class(self) -> type[torch.nn.Module]:
        return self.module.Model

    def init_inputs(self) -> list[Any]:
        return list(self.module.get_init_inputs())

    def inputs(self, seed: int, device: str = "cpu") -> list[Any]:
        """The problem's own inputs, drawn from every RNG seeded with `seed`. On the CPU by
        default; with another `device` that is the default device while `get_inputs`
        runs (the bench draws them on the reference's GPU: hundreds of MB in
        milliseconds instead of seconds), and tensors it makes elsewhere stay there."""
        seed_everything(seed)
        if device == "cpu":
            return [x.cpu() if isinstance(x, torch.Tensor) else x
                    for x in self.module.get_inputs()]
        with torch.device(device):
            return list(self.module.get_inputs())

    def build_model(self, seed: int = 0) -> torch.nn.Module:
        """The reference model in eval mode, its weights drawn with `seed`."""
        seed_everything(seed)
        return self.model_class(*self.init_inputs()).eval()


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def level_of(path: Path, root: Path) -> int | None:
    """The N of the nearest `levelN` folder between `root` and `path`, else None."""
    for part in reversed(path.relative_to(root).parts[:-1]):
        match = LEVEL_DIR.match(part)
        if match:
            return int(match.group(1))
    return None


def natural_key(text: str) -> list[Any]:
    """Sort key that orders "level2/10_x" after "level2/9_x"."""
    return [int(piece) if piece.isdigit() else piece.lower()
            for piece in re.split(r"(\d+)", text)]


def discover(suite: Path | str) -> list[Problem]:
    """Every problem file under `suite` (or `suite` itself when it is a file)."""
    root = Path(suite).resolve()
    if root.is_file():
        return [Problem(root.stem, root, level_of(root, root.parent) or 0)]
    if not root.is_dir():
        raise FileNotFoundError(f"suite not found: {suite}")
    files = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in SKIP_DIRS for p in parts[:-1]):
            continue
        if path.name.startswith(("_", ".")):
            continue
        files.append(path)
    levels = {path: level_of(path, root) for path in files}
    if any(level is not None for level in levels.values()):
        files = [path for path in files if levels[path] is not None]
    problems = [Problem(path.relative_to(root).with_suffix("").as_posix(), path,
                        levels[path] or 0) for path in files]
    return sorted(problems, key=lambda p: (p.level, natural_key(p.name)))


def import_file(path: Path, module_name: str) -> ModuleType:
    """Import one Python file as a fresh module (not kept in sys.modules)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(module_name, None)
    return module


def load(problem: Problem, size: str | None = None) -> LoadedProblem:
    """Import `problem`'s file, check its names and apply SIZES[size] when defined."""
    module_name = "kernelwright_problem_" + re.sub(r"\W", "_", problem.name)
    try:
        module = import_file(problem.path, module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # any failure of user code is the problem's
        raise ProblemError("load", f"import failed: {type(exc).__name__}: {exc}") from exc
    missing = [name for name in REQUIRED_NAMES if not hasattr(module, name)]
    if missing:
        raise ProblemError("load", "missing " + ", ".join(missing))
    if not (isinstance(module.Model, type) and issubclass(module.Model, torch.nn.Module)):
        raise ProblemError("load", "Model is not an nn.Module subclass")
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name)):
            raise ProblemError("load", f"{name} is not callable")
    applied = apply_size(module, size)
    return LoadedProblem(problem, module, applied)


def apply_size(module: ModuleType, size: str | None) -> str | None:
    """Apply the module's SIZES[size] overrides; returns the size applied or None."""
    sizes = getattr(module, "SIZES", None)
    if size is None or not isinstance(sizes, dict):
        return None
    if size not in sizes:
        raise ProblemError("load", f"SIZES has no entry {size!r} (has {sorted(sizes)})")
    vars(module).update(sizes[size])
    return size


def call_user(stage: str, fn: Callable[[], Any]) -> Any:
    """Run user code of a problem; any exception becomes a ProblemError for `stage`, but
    an allocation that failed, which is `oom.OutOfMemory` (not the problem's fault)."""
    try:
        return fn()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from user code counts too
        reraise_oom(exc, stage)
        raise ProblemError(stage, f"{type(exc).__name__}: {exc}") from exc
