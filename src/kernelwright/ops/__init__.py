"""The op registry: one entry per ATen op, mapping it onto the IR's primitives.

An entry is a lowering function registered under the op's ATen name
(`@register("aten.add.Tensor")`). It receives a `GraphBuilder` and the op's
arguments, with tensors as IR `Value`s and everything else as plain Python, and
returns the output Value (or a tuple for multi-output ops). Its shape rule is the
composition of the primitives' shape rules; capture checks the result against the
shape PyTorch recorded for that node. Backward ATen ops that decomposition leaves in a
training step's graph (convolution_backward, max pooling's) are in backward.py.

Importing this package imports every family module, which fills REGISTRY.
"""

from __future__ import annotations

from collections.abc import Callable

REGISTRY: dict[str, Callable] = {}


def register(*names: str):
    def deco(fn: Callable) -> Callable:
        for name in names:
            if name in REGISTRY:
                raise ValueError(f"op {name} registered twice")
            REGISTRY[name] = fn
        return fn
    return deco


def lookup(name: str) -> Callable | None:
    return REGISTRY.get(name)


from . import (  # noqa: E402, F401, E501
    attention,
    backward,
    conv,
    elementwise,
    linalg,
    losses,
    movement,
    norms,
    pool,
    recurrent,
    reductions,
    resize,
    scans,
)
