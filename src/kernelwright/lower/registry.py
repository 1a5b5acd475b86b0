"""The op registry: ATen op name -> lowering function.

The family modules beside this one register their lowerings here; importing
`kernelwright.lower` (which any import of this module does first) imports them all.
"""

from __future__ import annotations

from collections.abc import Callable

REGISTRY: dict[str, Callable] = {}


def register(*names: str):
    """Register the decorated lowering under each ATen name in `names`."""
    def deco(fn: Callable) -> Callable:
        for name in names:
            if name in REGISTRY:
                raise ValueError(f"op {name} registered twice")
            REGISTRY[name] = fn
        return fn
    return deco


def lookup(name: str) -> Callable | None:
    """The lowering registered under ATen name `name`, or None."""
    return REGISTRY.get(name)
