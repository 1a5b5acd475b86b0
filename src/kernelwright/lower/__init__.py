"""Lowering: one entry per ATen op in the registry (registry.py), mapping it onto the IR.

The entries map ATen ops onto the IR's primitives.

An entry is a lowering function registered under the op's ATen name
(`@register("aten.add.Tensor")`). It receives a `GraphBuilder` and the op's
arguments, with tensors as IR `Value`s and everything else as plain Python, and
returns the output Value (or a tuple for multi-output ops). Its shape rule is the
composition of the primitives' shape rules; capture checks the result against the
shape PyTorch recorded for that node. Backward ATen ops that decomposition leaves in a
training step's graph (convolution_backward, max pooling's) are in backward.py.

Importing this package imports every family module, which fills registry.REGISTRY.
"""

from . import (  # noqa: F401  (each family registers its lowerings)
    attention,
    backward,
    conv,
    elementwise,
    linalg,
    losses,
    movement,
    norms,
    pool,
    random,
    recurrent,
    reductions,
    resize,
    scans,
    sorting,
)
