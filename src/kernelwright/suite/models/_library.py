"""The library a models-suite problem builds its model from, imported when the model is
built: a problem file loads without it, and building says what is missing."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(name: str) -> ModuleType:
    """`import name`, or an ImportError saying that the problem needs that package.

    A package that is installed but cannot be imported counts as missing: torchvision built
    for another torch than the one installed raises a RuntimeError on import (an operator
    of its compiled library that this torch does not define), and so does timm through it.
    """
    try:
        return importlib.import_module(name)
    except (ImportError, RuntimeError) as exc:
        raise ImportError(f"this models-suite problem needs the {name} package (pip install "
                          f"{name}); importing it failed: {type(exc).__name__}: {exc}") from exc
