"""A compiled plan is data: kernels, buffers, inputs and outputs, nothing executable.

The scheduler (schedule.py) produces a `Plan`; the runtime (runtime.py) executes it.
Because it is plain data it can be summarized, saved and loaded (`save`/`load`: a
folder with plan.json and the constants in constants.safetensors), compared, and one
kernel in it replaced by another with the same bindings.

Buffers are physical: the memory planner has already folded intermediates whose
lifetimes do not overlap into one buffer, so `Buffer.size` is the largest tensor it
ever holds. Each kernel binds buffers by id: its inputs in order (then vec4 views of
some of them, templates.Generated.views), then its output. A binding may be a
window of its buffer (`Kernel.windows`): a kernel over a tensor larger than one
binding is dispatched once per chunk, each binding its chunk's bytes (chunks.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

FORMAT_VERSION = 1


@dataclass(frozen=True)
class BindingLimits:
    """What one kernel may bind on a device: storage buffers per kernel, bytes per
    binding, and the alignment of a binding's offset (runtime.Device.binding_limits)."""

    max_bindings: int
    max_bytes: int
    align: int


@dataclass
class Buffer:
    id: int
    nbytes: int
    kind: str  # 'input' | 'const' | 'temp' | 'output'
    dtype: str  # device dtype of what it holds ('f32', 'i32', 'bool' stored as u32)


@dataclass
class Kernel:
    name: str  # what it computes, e.g. "matmul+add+relu"
    source: str  # WGSL
    bindings: list[int]  # buffer ids: inputs..., vec4 views of some of them, then the output
    grid: tuple[int, int, int]  # workgroups dispatched
    source_lines: list[str] = field(default_factory=list)  # user lines it came from
    key: str = ""  # what it computes, independent of knobs (templates.KernelKey)
    knobs: dict = field(default_factory=dict)  # the template knobs it was generated with
    workgroup_bytes: int = 0  # workgroup memory it declares (runtime checks the device allows it)
    trusted: bool = True  # written by kernelwright's templates: no runtime checks (runtime.py)
    # per binding, [byte offset, byte size] of its buffer, or None for the whole buffer;
    # empty: every binding whole (chunks.py)
    windows: list = field(default_factory=list)

    def window(self, i: int) -> tuple[int, int] | None:
        """Binding i's [offset, size] in bytes, None for its whole buffer."""
        w = self.windows[i] if i < len(self.windows) else None
        return None if w is None else (int(w[0]), int(w[1]))


@dataclass
class TensorSpec:
    buffer: int
    shape: tuple[int, ...]
    torch_dtype: str  # e.g. 'float32', 'int64', 'bool'


@dataclass
class Plan:
    buffers: list[Buffer]
    kernels: list[Kernel]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    output_tree: str  # 'single' or 'tuple'
    constants: dict[int, np.ndarray] = field(default_factory=dict)  # buffer id -> data
    # (source, state) buffer ids: after a call's kernels the state buffer (a constant: a
    # buffer the module changes, a parameter a training step updates) takes the source's
    # bytes, so the next call reads the new value
    updates: list[tuple[int, int]] = field(default_factory=list)

    def summary(self) -> str:
        mib = sum(b.nbytes for b in self.buffers if b.kind != "const") / 2**20
        cmib = sum(b.nbytes for b in self.buffers if b.kind == "const") / 2**20
        lines = [f"plan: {len(self.kernels)} kernels, {len(self.buffers)} buffers "
                 f"({mib:.2f} MiB working, {cmib:.2f} MiB constants)"]
        for spec in self.inputs:
            lines.append(f"  input  b{spec.buffer}: {spec.torch_dtype}{list(spec.shape)}")
        for i, k in enumerate(self.kernels):
            names = [f"b{b}" + ("" if k.window(j) is None else
                                f"[{k.window(j)[0]}:+{k.window(j)[1]}]")
                     for j, b in enumerate(k.bindings)]
            lines.append(f"  k{i:<3} {k.name:<32} ({', '.join(names[:-1])}) -> {names[-1]}  "
                         f"grid {k.grid}")
        for spec in self.outputs:
            lines.append(f"  output b{spec.buffer}: {spec.torch_dtype}{list(spec.shape)}")
        for src, dst in self.updates:
            lines.append(f"  update b{dst} <- b{src}")
        return "\n".join(lines)

    def save(self, folder: str | Path) -> None:
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT_VERSION,
            "buffers": [asdict(b) for b in self.buffers],
            "kernels": [asdict(k) for k in self.kernels],
            "inputs": [asdict(t) for t in self.inputs],
            "outputs": [asdict(t) for t in self.outputs],
            "output_tree": self.output_tree,
            "updates": [list(u) for u in self.updates],
        }
        (folder / "plan.json").write_text(json.dumps(meta, indent=1))
        save_file({str(k): np.ascontiguousarray(v) for k, v in self.constants.items()},
                  str(folder / "constants.safetensors"))

    @staticmethod
    def load(folder: str | Path) -> Plan:
        from safetensors.numpy import load_file

        folder = Path(folder)
        meta = json.loads((folder / "plan.json").read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"{folder}: plan format {meta.get('format')}, "
                             f"this kernelwright reads {FORMAT_VERSION}")
        consts = load_file(str(folder / "constants.safetensors"))
        return Plan(
            buffers=[Buffer(**b) for b in meta["buffers"]],
            kernels=[Kernel(**{**k, "grid": tuple(k["grid"])}) for k in meta["kernels"]],
            inputs=[TensorSpec(**{**t, "shape": tuple(t["shape"])}) for t in meta["inputs"]],
            outputs=[TensorSpec(**{**t, "shape": tuple(t["shape"])}) for t in meta["outputs"]],
            output_tree=meta["output_tree"],
            constants={int(k): v for k, v in consts.items()},
            updates=[tuple(u) for u in meta.get("updates", [])],
        )
