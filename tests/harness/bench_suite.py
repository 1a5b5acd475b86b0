"""Tiny KernelBench-format problem files for the harness tests, written to a tmp folder.

The class names pick the candidate in bench_candidates.make (Relu, Softmax:
honest; Hang, Segfault, Exit: a candidate that hangs or crashes; SegfaultInTrial:
one that crashes when called).
"""

from __future__ import annotations

from pathlib import Path

HEADER = "import torch\nimport torch.nn as nn\n\n"


def problem(class_name: str, body: str = "return torch.relu(x)", shape: str = "rows, 32",
            extra: str = "rows = 64\nSIZES = {'small': {'rows': 8}, 'full': {'rows': 64}}\n",
            init: str = "def get_init_inputs():\n    return []\n",
            inputs: str | None = None) -> str:
    inputs = inputs or f"def get_inputs():\n    return [torch.randn({shape})]\n"
    return (f"{HEADER}{extra}\n\nclass {class_name}(nn.Module):\n"
            f"    def forward(self, x):\n        {body}\n\n\nModel = {class_name}\n\n\n"
            f"{inputs}\n\n{init}")


RELU = problem("Relu")
SOFTMAX = problem("Softmax", "return torch.softmax(x, dim=1)", "8, 64", extra="")
SEGFAULT = problem("Segfault")
SEGFAULT_IN_TRIAL = problem("SegfaultInTrial")
HANG = problem("Hang")
EXIT = problem("Exit")
MISSING_GET_INPUTS = problem("Relu", inputs="# no get_inputs here\n")
IMPORT_ERROR = "import torch\nimport kernelwright_no_such_module\n" + RELU
REFERENCE_RAISES = problem("Relu", "raise RuntimeError('the reference is broken')")
INIT_RAISES = problem("Relu", init="def get_init_inputs():\n    return [1, 2, 3]\n")
LINEAR = (HEADER + "batch, n_in, n_out = 64, 256, 128\n"
          "SIZES = {'small': {'batch': 4, 'n_in': 16, 'n_out': 8}, "
          "'full': {'batch': 64, 'n_in': 256, 'n_out': 128}}\n\n\n"
          "class Model(nn.Module):\n"
          "    def __init__(self, n_in, n_out):\n"
          "        super().__init__()\n"
          "        self.linear = nn.Linear(n_in, n_out)\n\n"
          "    def forward(self, x):\n"
          "        return torch.relu(self.linear(x))\n\n\n"
          "def get_inputs():\n    return [torch.randn(batch, n_in)]\n\n\n"
          "def get_init_inputs():\n    return [n_in, n_out]\n")


def write_suite(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> text) under `root`; returns `root`."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CANDIDATES = str(Path(__file__).with_name("bench_candidates.py")) + ":make"
