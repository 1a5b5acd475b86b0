"""A compiled plan is data: kernels, buffers, inputs and outputs, nothing executable.

The scheduler (schedule.py) produces a `Plan`; the runtime (runtime.py) executes it.
Because it is plain data it can be summarized, saved and loaded (`save`/`load`: a
folder with plan.json and the constants in constants.safetensors), compared, and one
kernel in it replaced by another with the same bindings. A loaded plan is not
trusted: `load` checks its structure (`validate`) and marks its kernels untrusted, so
that wgpu compiles them with its runtime checks (index clamps, loop bounds), unless
the caller vouches for the file.

Buffers are physical: the memory planner has already folded intermediates whose
lifetimes do not overlap into one buffer, so `Buffer.size` is the largest tensor it
ever holds. Each kernel binds buffers by id: its inputs in order (then vec4 views of
some of them, kernels.Generated.views), then its output. A binding may be a
window of its buffer (`Kernel.windows`): a kernel over a tensor larger than one
binding is dispatched once per chunk, each binding its chunk's bytes (chunks.py).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file
from torch.utils import _pytree as pytree

from .codegen.codegen import BINDING, used_bindings
from .dtypes import DEVICE_DTYPE_OF, DEVICE_DTYPES, element_type, holds, itemsize, numpy_type

# 2: output_tree may be a pytree spec ({"pytree": ...}); Python numbers baked in (scalars);
# 3: input_tree (the arguments' structure where a cache is passed in) and checks (the
# module's checks of values), which a reader of format 2 would skip
FORMAT_VERSION = 3
READS = (1, 2, 3)  # the formats load reads
BUFFER_KINDS = ("input", "const", "temp", "output")
_ELEMENT = re.compile(r"\s*:\s*array\s*<\s*(?:vec[234]\s*<\s*)?(\w+)")


class PlanFileError(ValueError):
    """A saved plan that cannot be read, or whose contents are inconsistent."""


@dataclass
class Buffer:
    id: int
    nbytes: int
    kind: str  # 'input' | 'const' | 'temp' | 'output'
    dtype: str  # device dtype of what it holds ('f32', 'i32', 'bool' stored as u32)
    # bytes per device buffer where it is larger than the device allocates: held as
    # several buffers of this size (the last one shorter), each window within one
    # (chunks.segment_bytes); 0: one device buffer
    segment: int = 0


@dataclass
class Kernel:
    name: str  # what it computes, e.g. "matmul+add+relu"
    source: str  # WGSL
    # buffer ids: inputs..., vec4 views of some of them, buffers it also writes (bound
    # read_write: the caches of puts it stores, kernels/put.fused_puts), then the output
    bindings: list[int]
    grid: tuple[int, int, int]  # workgroups dispatched
    source_lines: list[str] = field(default_factory=list)  # user lines it came from
    key: str = ""  # what it computes, independent of knobs (kernels.KernelKey)
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
    buffer: int | None  # None: an empty output (a dimension of size 0), held nowhere
    shape: tuple[int, ...]
    torch_dtype: str  # e.g. 'float32', 'int64', 'bool'


@dataclass
class Plan:
    buffers: list[Buffer]
    kernels: list[Kernel]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    # how outputs are returned: 'single' (one tensor), 'tuple' (a flat tuple), 'none'
    # (forward returned None: no outputs), or a
    # torch.utils._pytree.TreeSpec of any other structure (dicts, lists, nesting, ...)
    output_tree: str | Any
    constants: dict[int, np.ndarray] = field(default_factory=dict)  # buffer id -> data
    # (source, state) buffer ids: after a call's kernels the state buffer (a constant: a
    # buffer the module changes, a parameter a training step updates) takes the source's
    # bytes, so the next call reads the new value; a state a copy kernel writes
    # (schedule.early_updates) has none
    updates: list[tuple[int, int]] = field(default_factory=list)
    # by name: the state a call updates, then state another plan sharing this one's
    # updates and this one reads (ir.Graph.shared)
    state: list[tuple[str, TensorSpec]] = field(default_factory=list)
    # (input position, where its new value is): inputs a call changes in place, written
    # back into the caller's tensors
    writes: list[tuple[int, TensorSpec]] = field(default_factory=list)
    # the module's checks of values (ir.Graph.checks): a bool each call computes, and
    # the message a call raises where it is false
    checks: list[tuple[TensorSpec, str]] = field(default_factory=list)
    # Python numbers (or None) among the flattened call arguments, by position: baked
    # into the kernels at compile time, so a call must pass the same values
    scalars: dict[int, Any] = field(default_factory=dict)
    # the structure of the call's arguments (a TreeSpec, None counted as a leaf) where it
    # holds more than their count: a cache passed in (frontend/caches.py), whose lengths
    # are baked in; None: not checked
    input_tree: Any = None

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
            where = "empty" if spec.buffer is None else f"b{spec.buffer}"
            lines.append(f"  output {where}: {spec.torch_dtype}{list(spec.shape)}")
        for src, dst in self.updates:
            names = [n for n, t in self.state if t.buffer == dst]
            lines.append(f"  update b{dst} ({', '.join(names)}) <- b{src}")
        copied = {dst for _, dst in self.updates}
        written = {k.bindings[i] for k in self.kernels
                   for i, access in used_bindings(k.source).items() if access == "read_write"}
        for name, t in self.state:  # copied over its old value by a kernel
            if t.buffer not in copied and t.buffer in written:
                lines.append(f"  update b{t.buffer} ({name}) by a kernel")
        for i, spec in self.writes:
            lines.append(f"  write  input {i} <- b{spec.buffer}")
        for spec, message in self.checks:
            lines.append(f"  check  b{spec.buffer}: {message}")
        return "\n".join(lines)

    def save(self, folder: str | Path) -> None:
        """Write plan.json and constants.safetensors into `folder`."""
        folder = Path(folder)
        tree = _dump_tree(self.output_tree, "output")
        inputs_tree = None if self.input_tree is None else _dump_tree(self.input_tree, "input")
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT_VERSION,
            "buffers": [asdict(b) for b in self.buffers],
            "kernels": [asdict(k) for k in self.kernels],
            "inputs": [asdict(t) for t in self.inputs],
            "outputs": [asdict(t) for t in self.outputs],
            "output_tree": tree,
            "updates": [list(u) for u in self.updates],
            "state": [[n, asdict(t)] for n, t in self.state],
            "writes": [[i, asdict(t)] for i, t in self.writes],
            "checks": [[asdict(t), m] for t, m in self.checks],
            "scalars": [[i, v] for i, v in sorted(self.scalars.items())],
            "input_tree": inputs_tree,
        }
        (folder / "plan.json").write_text(json.dumps(meta, indent=1))
        save_file({str(k): np.ascontiguousarray(v) for k, v in self.constants.items()},
                  str(folder / "constants.safetensors"))

    @staticmethod
    def load(folder: str | Path, trust: bool = False) -> Plan:
        """The plan saved in `folder`, validated (`validate`). Its kernels load untrusted
        (wgpu's runtime checks on) unless `trust` is True, which keeps each kernel's saved
        `trusted` flag: only for a plan this program wrote itself. A file that cannot be
        read or fails validation is a PlanFileError naming it."""
        folder = Path(folder)
        path = folder / "plan.json"
        try:
            meta = json.loads(path.read_text())
            if not isinstance(meta, dict):
                raise TypeError("plan.json does not hold an object")
            if meta.get("format") not in READS:
                raise PlanFileError(f"{path}: plan format {meta.get('format')!r}, this "
                                    f"kernelwright reads {', '.join(map(str, READS))}")
            plan = Plan(
                buffers=[Buffer(**b) for b in meta["buffers"]],
                kernels=[Kernel(**{**k, "grid": tuple(k["grid"])}) for k in meta["kernels"]],
                inputs=[TensorSpec(**{**t, "shape": tuple(t["shape"])})
                        for t in meta["inputs"]],
                outputs=[TensorSpec(**{**t, "shape": tuple(t["shape"])})
                         for t in meta["outputs"]],
                output_tree=_load_tree(meta["output_tree"], "output_tree"),
                scalars={int(i): v for i, v in meta.get("scalars", [])},
                input_tree=None if meta.get("input_tree") is None
                else _load_tree(meta["input_tree"], "input_tree"),
                updates=[tuple(u) for u in meta.get("updates", [])],
                state=[(str(n), TensorSpec(**{**t, "shape": tuple(t["shape"])}))
                       for n, t in meta.get("state", [])],
                writes=[(int(i), TensorSpec(**{**t, "shape": tuple(t["shape"])}))
                        for i, t in meta.get("writes", [])],
                checks=[(TensorSpec(**{**t, "shape": tuple(t["shape"])}), str(m))
                        for t, m in meta.get("checks", [])],
            )
            if not trust:
                for k in plan.kernels:
                    k.trusted = False
            path = folder / "constants.safetensors"
            plan.constants = {int(k): v for k, v in load_file(str(path)).items()}
            path = folder
            validate(plan)
        except PlanFileError:
            raise
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, SafetensorError, KeyError,
                IndexError, TypeError, ValueError, AttributeError) as e:
            raise PlanFileError(f"{path}: not a valid kernelwright plan: "
                                f"{type(e).__name__}: {e}") from e
        return plan


def _dump_tree(tree, what: str) -> str | dict:
    if isinstance(tree, str):
        return tree
    try:
        return {"pytree": pytree.treespec_dumps(tree)}
    except Exception as e:  # noqa: BLE001 - a type pytree cannot serialize
        raise ValueError(f"the module's {what} structure cannot be saved: {e}") from e


def _load_tree(tree, what: str) -> str | Any:
    if tree in ("single", "tuple", "none"):
        return tree
    if isinstance(tree, dict) and isinstance(tree.get("pytree"), str):
        try:
            return pytree.treespec_loads(tree["pytree"])
        except NotImplementedError as e:  # a type this process has not registered
            raise ValueError(
                f"{e} (import the package that defines it first; for transformers' caches "
                "import transformers, then call kernelwright.register_cache_pytrees())") from e
    raise ValueError(f"{what} {tree!r} is none of 'single', 'tuple', 'none' or a pytree "
                     "spec")


def validate(plan: Plan) -> None:
    """Check that a plan's parts agree (a ValueError says where they do not): buffer ids
    in order, kinds and dtypes known; every kernel binding each storage binding its WGSL
    declares to an existing buffer of the declared element type, with a grid of
    non-negative integers; inputs, outputs and constants within their buffers' sizes
    and of their dtypes (an empty output has no buffer); the output structure holding as
    many tensors as the outputs.
    (What the WGSL itself indexes stays with wgpu's runtime checks, and the grid with
    the device's dispatch limit, runtime.check_limits.)"""
    n = len(plan.buffers)
    for i, b in enumerate(plan.buffers):
        if b.id != i or b.kind not in BUFFER_KINDS or b.dtype not in DEVICE_DTYPES \
                or not _count(b.nbytes) or b.nbytes == 0:
            raise ValueError(f"buffer {i} is malformed: {b}")
    for j, k in enumerate(plan.kernels):
        where = f"kernel {j} ({k.name})"
        if not isinstance(k.source, str) or len(k.grid) != 3 \
                or not all(_count(g) for g in k.grid) \
                or not isinstance(k.bindings, list) or not _count(k.workgroup_bytes):
            raise ValueError(f"{where} is malformed (source, grid {k.grid}, bindings, "
                             "workgroup_bytes)")
        used = used_bindings(k.source)
        for m in BINDING.finditer(k.source):
            group = int(m.group(1) if m.group(1) is not None else m.group(4))
            binding = int(m.group(2) if m.group(2) is not None else m.group(3))
            if group != 0 or m.group(5) != "storage" or binding not in used:
                continue
            if binding >= len(k.bindings) or not _count(k.bindings[binding]) \
                    or k.bindings[binding] >= n:
                raise ValueError(f"{where}: binding {binding} names no buffer of the plan's "
                                 f"{n}")
            element = _ELEMENT.match(k.source, m.end())
            buf = plan.buffers[k.bindings[binding]]
            if element is None or element[1] != element_type(buf.dtype):
                raise ValueError(f"{where}: binding {binding} is declared "
                                 f"{element[1] if element else 'no array'}, its buffer "
                                 f"b{buf.id} holds {buf.dtype}")
        if k.windows and len(k.windows) != len(k.bindings):
            raise ValueError(f"{where}: {len(k.windows)} windows for {len(k.bindings)} bindings")
        for i, b in enumerate(k.bindings):
            w = k.window(i) if k.windows else None
            if w is not None and (w[0] < 0 or w[1] <= 0 or b >= n
                                  or w[0] + w[1] > (plan.buffers[b].nbytes + 15) // 16 * 16):
                raise ValueError(f"{where}: binding {i}'s window {list(w)} is outside its "
                                 f"buffer")
    for src, dst in plan.updates:
        if not (_count(src) and _count(dst) and src < n and dst < n) \
                or plan.buffers[dst].kind != "const" \
                or plan.buffers[src].nbytes > plan.buffers[dst].nbytes:
            raise ValueError(f"update b{dst} <- b{src} is malformed")
    for i, t in plan.writes:
        if not (_count(i) and i < len(plan.inputs)) or plan.inputs[i].shape != t.shape:
            raise ValueError(f"a write back into input {i} is malformed")
    for t, message in plan.checks:
        if not isinstance(message, str) or t.buffer is None or t.shape != () \
                or t.torch_dtype != "bool":
            raise ValueError(f"a check ({message!r}) is malformed")
    for what, specs in (("input", plan.inputs), ("output", [*plan.outputs,
                                                            *(t for _, t in plan.writes),
                                                            *(t for t, _ in plan.checks)])):
        for i, t in enumerate(specs):
            if what == "output" and i < len(plan.outputs) and t.buffer is None:
                if 0 not in t.shape or not all(_count(d) for d in t.shape) \
                        or t.torch_dtype not in DEVICE_DTYPE_OF:
                    raise ValueError(f"output {i} has no buffer and is not empty: {t}")
                continue  # an empty output, held nowhere
            if not _count(t.buffer) or t.buffer >= n \
                    or not all(_count(d) for d in t.shape):
                raise ValueError(f"{what} {i} is malformed: {t}")
            buf = plan.buffers[t.buffer]
            if not holds(buf.dtype, t.torch_dtype):
                raise ValueError(f"{what} {i} is {t.torch_dtype}, its buffer b{buf.id} holds "
                                 f"{buf.dtype}")
            need = itemsize(buf.dtype) * math.prod(t.shape)
            if need > buf.nbytes:
                raise ValueError(f"{what} {i} of shape {list(t.shape)} needs {need} bytes, "
                                 f"its buffer b{buf.id} has {buf.nbytes}")
    for bid, data in plan.constants.items():
        if not 0 <= bid < n or plan.buffers[bid].kind != "const" \
                or data.nbytes > plan.buffers[bid].nbytes \
                or data.dtype != np.dtype(numpy_type(plan.buffers[bid].dtype)):
            raise ValueError(f"constant for buffer {bid} does not fit it "
                             f"({data.dtype}, {data.nbytes} bytes)")
    tree = plan.output_tree
    leaves = 1 if tree == "single" else 0 if tree == "none" \
        else len(plan.outputs) if tree == "tuple" \
        else tree.num_leaves
    if leaves != len(plan.outputs):
        raise ValueError(f"the output structure holds {leaves} tensors, the plan has "
                         f"{len(plan.outputs)} outputs")
    if plan.input_tree is not None and (
            not isinstance(plan.input_tree, pytree.TreeSpec)
            or plan.input_tree.num_leaves != len(plan.inputs) + len(plan.scalars)):
        raise ValueError("the argument structure does not hold the plan's inputs and scalars")
    for i, v in plan.scalars.items():
        if not _count(i) or not (v is None or isinstance(v, (bool, int, float, str))):
            raise ValueError(f"scalar argument {i} is malformed: {v!r}")


def _count(x) -> bool:
    """A non-negative int (bool excluded)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0
