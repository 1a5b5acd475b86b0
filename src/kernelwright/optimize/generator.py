"""The generator interface shared by every kernel generator.

A generator is given a kernel's spec (its WGSL source, the buffers it binds with
shapes and dtypes, a reference computation, its profile) and the history of earlier
attempts on that kernel (compile errors, mismatches, timings) and returns one
candidate kernel, or None when it has nothing more to try.  The search loop
(optimize/search.py) verifies and times every candidate in a sandboxed subprocess;
a generator never runs code itself.

Generators are found by name through a small registry: ``register(name, factory)``
and ``make(name)``.  ``"builtin"`` is the template knob search (optimize/builtin.py);
``"openai"`` and ``"anthropic"`` are registered by optimize/llm.py.  A name may carry
an argument after a colon (``"openai:gpt-4o"``); the factory receives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

STATUSES = ("compile_error", "mismatch", "rejected", "timeout", "crash", "slower", "improved")


@dataclass
class Binding:
    """One buffer the kernel binds, in binding order (inputs..., output last)."""

    index: int  # @binding(index) in @group(0)
    name: str  # the WGSL variable name
    shape: tuple[int, ...]
    dtype: str  # device dtype: "f32" | "i32" | "bool" (bool stored as u32)
    access: str  # "read" | "read_write"


@dataclass
class KernelSpec:
    key: str  # stable id of what the kernel computes (the plan kernel's key + shapes)
    name: str  # e.g. "matmul+add+relu"
    kind: str  # template kind ("matmul", "elementwise", "reduce", ...)
    source: str  # the current (baseline) WGSL, entry point "main"
    bindings: list[Binding]
    grid: tuple[int, int, int]  # workgroups dispatched
    knobs: dict  # template knobs the baseline was generated with ({} if none)
    description: str  # what it computes, in words (the fused ops, shapes)
    reference: str  # the reference computation, as PyTorch-like code or the IR ops
    profile: dict  # {"time_ms": float, "share": fraction of module GPU time, ...}


@dataclass
class Attempt:
    """One earlier candidate and what became of it."""

    generator: str
    source: str
    knobs: dict | None
    grid: tuple[int, int, int] | None
    status: str  # one of STATUSES
    message: str  # compiler text / first mismatching elements + error norms / why rejected / timing
    time_ms: float | None  # candidate's GPU time when it ran correctly
    best_ms: float | None  # the best correct time known when it was judged


@dataclass
class Candidate:
    source: str  # full WGSL with the same bindings as spec.bindings
    grid: tuple[int, int, int] | None = None  # None: spec.grid
    knobs: dict | None = None  # set by the built-in generator (template knobs that made source)
    note: str = ""  # the generator's own summary of the change
    # {"input_tokens": .., "output_tokens": .., "cost_usd": ..} spent to make it
    usage: dict = field(default_factory=dict)


class ProposalFailed(Exception):
    """Raised by ``propose`` when the generator tried and got no kernel (a model reply
    without a ```wgsl block, a request that failed after its retries). The loop records
    it as an attempt with status "rejected" and this message, so that the next prompt
    says what went wrong, and counts ``usage`` (what the try cost) against the budget."""

    def __init__(self, message: str, usage: dict | None = None):
        super().__init__(message)
        self.usage = usage or {}


class Generator(Protocol):
    name: str  # e.g. "builtin", "openai:gpt-x", "anthropic:claude-x"

    def propose(self, spec: KernelSpec, history: list[Attempt]) -> Candidate | None:
        """One candidate for ``spec`` given ``history``; None: nothing more to try."""
        ...


_REGISTRY: dict[str, Callable[[str | None], Generator]] = {}


def register(name: str, factory: Callable[[str | None], Generator]) -> None:
    """Register a generator factory under ``name``; it is called with the text after
    a colon in the requested name (``"openai:gpt-4o"`` -> ``"gpt-4o"``) or None."""
    _REGISTRY[name] = factory


def _load_builtin_modules() -> None:
    # importing these modules registers their generators
    from kernelwright.optimize import builtin  # noqa: F401

    try:
        from kernelwright.optimize import llm  # noqa: F401
    except ImportError:
        pass


def names() -> list[str]:
    _load_builtin_modules()
    return sorted(_REGISTRY)


def make(name: str) -> Generator:
    """The generator registered as ``name`` (``"builtin"``, ``"openai:MODEL"``, ...)."""
    _load_builtin_modules()
    base, _, arg = name.partition(":")
    if base not in _REGISTRY:
        raise ValueError(f"unknown generator {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[base](arg or None)
