"""The generators by name: ``builtin`` and the language models (``openai``, ``anthropic``).

Importing builtin.py and llm.py registers their factories with generator.register.
"""

from __future__ import annotations

from . import builtin, llm  # noqa: F401  (each registers its generators)
from .generator import REGISTRY, Generator


def names() -> list[str]:
    """The registered generator names."""
    return sorted(REGISTRY)


def make(name: str) -> Generator:
    """The generator registered as ``name`` (``"builtin"``, ``"openai:MODEL"``, ...)."""
    base, _, arg = name.partition(":")
    if base not in REGISTRY:
        raise ValueError(f"unknown generator {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[base](arg or None)
