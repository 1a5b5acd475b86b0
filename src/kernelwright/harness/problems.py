"""Problems: find and load KernelBench-format files.

A problem is one Python file that defines ``Model`` (an ``nn.Module``),
``get_inputs()`` and ``get_init_inputs()``. A suite is a folder of such files,
flat or nested by level (``level1/``, ``level2/``, ...); the level of a file is the
number in the nearest ``levelN`` folder above it, else 0. A KernelBench checkout
is a suite too: when any file lies under a ``levelN`` folder, only such files are
taken, so the checkout's own scripts are left alone.

Files may define ``SIZES = {"small": {...}, "full": {...}}``: dicts of
module-global overrides applied before ``get_init_inputs``/``get_inputs`` run.
Files without ``SIZES`` are used as they are. ``--set NAME=VALUE`` overrides
(`parse_override`, `apply_overrides`) are applied after SIZES: a name the module does not
define is a `ProblemError` naming the problem. A `dtype` given to `load` casts the
reference model (``.to(dtype)``) and every floating-point input (integer inputs stay as
they are): ``kernelwright bench --dtype``.

`discover` hands a sorted list of `Problem` (name, path, level) to the runner;
`load` hands a `LoadedProblem` (the module's three names, sized) to the worker,
or raises `ProblemError` with the reason the file cannot be used.
"""

from __future__ import annotations

import ast
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
# the dtypes `kernelwright bench --dtype` may cast a problem to, by name
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
}


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
    dtype: torch.dtype | None = None  # the model and float inputs cast to it; None: as made

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
            return [self.cast(x.cpu()) if isinstance(x, torch.Tensor) else x
                    for x in self.module.get_inputs()]
        with torch.device(device):
            return [self.cast(x) for x in self.module.get_inputs()]

    def cast(self, x: Any) -> Any:
        """`x` in the problem's `dtype` where it is a floating-point tensor and one is set."""
        if self.dtype is None or not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return x
        return x.to(self.dtype)

    def build_model(self, seed: int = 0) -> torch.nn.Module:
        """The reference model in eval mode, its weights drawn with `seed` (and cast to
        `dtype` when one is set)."""
        seed_everything(seed)
        model = self.model_class(*self.init_inputs()).eval()
        return model if self.dtype is None else model.to(self.dtype)


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


def import_file(path: Path, module_name: str, keep: bool = False) -> ModuleType:
    """Import one Python file as a fresh module, registered in sys.modules while it runs
    (dataclasses and pickling look modules up by name) and afterwards only with `keep`
    (a worker that traces the module's functions with torch.compile, which imports the
    module of each function it inlines by name)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if not keep:
            sys.modules.pop(module_name, None)
    return module


def load(problem: Problem, size: str | None = None, overrides: dict[str, str] | None = None,
         dtype: str | None = None) -> LoadedProblem:
    """Import `problem`'s file, check its names, apply SIZES[size] when defined, then
    `overrides` (global name -> Python literal text, `apply_overrides`); `dtype` (a name of
    DTYPES) is the dtype its model and float inputs are cast to."""
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
    apply_overrides(module, overrides or {}, problem.name)
    return LoadedProblem(problem, module, applied, DTYPES[dtype] if dtype else None)


def apply_size(module: ModuleType, size: str | None) -> str | None:
    """Apply the module's SIZES[size] overrides; returns the size applied or None."""
    sizes = getattr(module, "SIZES", None)
    if size is None or not isinstance(sizes, dict):
        return None
    if size not in sizes:
        raise ProblemError("load", f"SIZES has no entry {size!r} (has {sorted(sizes)})")
    vars(module).update(sizes[size])
    return size


def parse_override(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as (NAME, VALUE's text); raises ValueError unless NAME is an
    identifier and VALUE a Python literal (``ast.literal_eval``: quote a string)."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name.isidentifier():
        raise ValueError(f"{text!r} is not NAME=VALUE")
    try:
        ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{text!r}: {value!r} is not a Python literal (a number, a quoted "
                         f"string, a tuple, ...): {type(exc).__name__}") from None
    return name, value


def apply_overrides(module: ModuleType, overrides: dict[str, str], name: str) -> None:
    """Set each of the module's globals named in `overrides` to its literal's value; one it
    does not define is a ProblemError naming the problem `name`."""
    unknown = [key for key in overrides if key not in vars(module)]
    if unknown:
        raise ProblemError("load", f"--set {', '.join(unknown)}: problem {name} has no "
                           f"global {' or '.join(map(repr, unknown))}")
    for key, value in overrides.items():
        setattr(module, key, ast.literal_eval(value))


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
