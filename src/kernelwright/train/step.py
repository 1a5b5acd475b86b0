"""A compiled training step: forward, loss, backward, clipping and the optimizer update
as one plan, one submission of kernels per step.

`compile_training` exports the model with its loss (`capture_joint`: AOTAutograd's joint
forward-backward export, the graph of the loss and its gradients with respect to every
parameter), lowers that graph through the op registry
(backward ATen ops included: lower/backward.py) and appends the optimizer's update
(train/optim.py) for every parameter that has a gradient. Parameters and optimizer
state are constants of the graph that the graph updates (`Graph.updates`): they live
in GPU buffers, each step reads the values the step before left there, and nothing
but the batch, a few per-step scalars (the learning rate, bias corrections) and the
loss crosses between host and GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import operator
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..compiler import CompiledModule, _collector_paused
from ..frontend.capture import (
    check_nodes,
    decomposition_table,
    fx_to_ir,
    user_line,
    with_state_buffers,
)
from ..ir.ir import CompileError, GraphBuilder, Value
from ..lower.attention import flash_fits
from ..lower.random import key_tensor
from ..lower.registry import lookup
from ..options import CompileOptions
from ..plan import Plan
from ..runtime.runtime import Device, default_device
from ..schedule.remat import recompute_late_reads
from ..schedule.schedule import build_plan
from ..tune import choose_knobs
from ..tune.waves import device_waves
from .optim import Optimizer, ParamGroups, from_torch, torch_settings

# the CPU's flash attention (kept whole by every capture: capture.KEEP_WHOLE), lowered by
# lower/attention.py with its backward
FLASH_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
# the torch versions whose joint export (aot_export_joint_with_descriptors) is tested: 2.13
# in CI, 2.11 on the GPU machine (bench --train, 2026-12-07)
JOINT_EXPORT_TESTED = ("2.11", "2.13")
# torch.nn.utils.clip_grad_norm_'s guard against a zero norm
CLIP_EPS = 1e-6
# the format tag of TrainingStep.save's checkpoints
CHECKPOINT_FORMAT = "kernelwright.training/2"


class WithLoss(torch.nn.Module):
    """The model and its loss as one module: forward(*batch) -> the loss. With a
    `loss_fn`, the model takes every element of the batch but the last and the loss
    compares its output with the last (the target); without, the model computes the
    loss from the whole batch itself."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable | None) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *batch):
        if self.loss_fn is None:
            return self.model(*batch)
        return self.loss_fn(self.model(*batch[:-1]), batch[-1])


@dataclasses.dataclass
class Joint:
    """The joint forward-backward ATen graph of a model's loss (capture_joint): its
    placeholders are the parameters, the buffers, the batch and the loss's unit tangent;
    its outputs the buffers' new values, the loss and the parameters' gradients."""

    graph_module: torch.fx.GraphModule
    constants: dict[str, torch.Tensor]  # placeholder -> its parameter, buffer or tangent
    params: dict[str, str]  # placeholder -> the parameter's name (WithLoss's)
    loss: int  # the loss's output index
    grads: list[tuple[int, str]]  # (output index, the parameter's name) per gradient
    mutations: dict[int, tuple[str, str]]  # as Captured.mutations: output -> (placeholder, name)

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph


def capture_joint(model: torch.nn.Module, example_batch: tuple,
                  loss_fn: Callable | None) -> Joint:
    """The joint forward-backward ATen graph of the model's loss on `example_batch`, with
    capture's decompositions: one functionalized trace of the eager model under fake
    tensors by AOTAutograd (torch._functorch.aot_autograd.aot_export_joint_with_descriptors,
    tested on torch 2.13), each placeholder and output described (a parameter, a buffer,
    the batch, the loss's tangent; the loss, a gradient, a buffer's new value). Attention
    is traced as the CPU's flash attention op and its backward op where PyTorch takes
    that backend and lower.attention.flash_fits says our fused kernels do (the forward
    writes each row's log-sum-exp, the backward computes the scores again block by
    block: no L x S value); where one attention of the model does not fit, the model is
    traced again under the math backend (plain matmul and softmax ops, and their
    backward, for every attention). The model's plain tensor attributes are traced
    as buffers (capture.with_state_buffers); an unused parameter gets no gradient and is
    not updated, as torch.optim leaves a parameter without a gradient."""
    try:  # torch's joint export, present in some versions only: imported where it is needed
        from torch._functorch._aot_autograd import descriptors as desc
        from torch._functorch.aot_autograd import aot_export_joint_with_descriptors
    except ImportError as e:
        raise CompileError(f"training needs torch._functorch.aot_autograd."
                           f"aot_export_joint_with_descriptors (torch {JOINT_EXPORT_TESTED[0]}-"
                           f"{JOINT_EXPORT_TESTED[1]}); torch {torch.__version__} has none") from e

    module, _ = with_state_buffers(WithLoss(model, loss_fn))  # tensor attributes: buffers
    batch = tuple(example_batch)
    # the torch-function metadata mode records what nothing here reads: 8% of the trace
    quiet = {k: True for k in ("_disable_torch_fn_metadata_mode",)
             if k in inspect.signature(aot_export_joint_with_descriptors).parameters}

    def trace(backends: list[SDPBackend]) -> torch.fx.GraphModule:
        try:
            with contextlib.ExitStack() as stack, sdpa_kernel(backends):
                return aot_export_joint_with_descriptors(
                    stack, module, batch, decompositions=decomposition_table(),
                    **quiet).graph_module
        except Exception as e:
            raise CompileError(f"the training step of {type(model).__name__} with its loss "
                               f"could not be captured: {e}") from e

    gm = trace([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])
    if not all(_flash_fits(n) for n in gm.graph.nodes if n.target is FLASH_FORWARD):
        gm = trace([SDPBackend.MATH])
    own = dict(module.named_parameters(remove_duplicate=False)) | \
        dict(module.named_buffers(remove_duplicate=False))
    constants: dict[str, torch.Tensor] = {}
    params: dict[str, str] = {}
    tangents = []
    for node in gm.graph.find_nodes(op="placeholder"):
        d = node.meta.get("desc")
        if isinstance(d, (desc.ParamAOTInput, desc.BufferAOTInput)):
            constants[node.name] = own[d.target].detach()
            if isinstance(d, desc.ParamAOTInput):
                params[node.name] = d.target
        elif isinstance(d, desc.TangentAOTInput):
            tangents.append(node)
        elif not isinstance(d, desc.PlainAOTInput):
            raise CompileError(f"the joint graph of {type(model).__name__} has an input "
                               f"kernelwright does not support: {d}")
    out = gm.graph.output_node()
    placeholder = {d.target if isinstance(d, (desc.ParamAOTInput, desc.BufferAOTInput))
                   else d.idx: n.name for n in gm.graph.find_nodes(op="placeholder")
                   for d in [n.meta.get("desc")] if not isinstance(d, desc.TangentAOTInput)}
    losses, grads, changed = [], [], {}
    for i, (value, d) in enumerate(zip(out.args[0], out.meta.get("desc") or [])):
        if value is None:
            continue
        if isinstance(d, desc.PlainAOTOutput):
            losses.append(i)
        elif isinstance(d, desc.GradAOTOutput) and isinstance(d.grad_of, desc.ParamAOTInput):
            grads.append((i, d.grad_of.target))
        elif isinstance(d, desc.InputMutationAOTOutput):
            m = d.mutated_input
            if isinstance(m, desc.BufferAOTInput):
                changed[i] = (placeholder[m.target], m.target)
            elif isinstance(m, desc.PlainAOTInput):
                changed[i] = (placeholder[m.idx], placeholder[m.idx])
            else:
                raise CompileError(f"the training step changes {m} in place, which "
                                   "kernelwright does not support")
        else:
            raise CompileError(f"the joint graph of {type(model).__name__} has an output "
                               f"kernelwright does not support: {d}")
    val = out.args[0][losses[0]].meta.get("val") if len(losses) == 1 else None
    if len(losses) != 1 or not isinstance(val, torch.Tensor) or val.numel() != 1 \
            or not val.dtype.is_floating_point or len(tangents) != 1:
        got = "" if val is None else f", {val.dtype}{list(val.shape)}"
        raise CompileError("the loss must be one floating-point tensor of one element "
                           f"(got {len(losses)} outputs{got})")
    tangent = tangents[0].meta["val"]
    constants[tangents[0].name] = torch.ones(tuple(tangent.shape), dtype=tangent.dtype)
    joint = Joint(gm, constants, params, losses[0], grads, changed)
    _check_lowerings(joint, module, batch)
    return joint


def _flash_fits(node: torch.fx.Node) -> bool:
    """Whether a flash attention node of the joint trace is one our kernels take
    (lower.attention.flash_fits of its head dims and dropout)."""
    q, _, v = (a.meta["val"] for a in node.args[:3])
    dropout = node.args[3] if len(node.args) > 3 else node.kwargs.get("dropout_p", 0.0)
    return flash_fits(q.shape[-1], v.shape[-1], dropout)


def _check_lowerings(joint: Joint, module: torch.nn.Module, batch: tuple) -> None:
    """A CompileError for the first op of the joint graph without a lowering, naming the
    op and, for an op of the backward, the forward op it differentiates: its module path
    and source line, from a torch.export of the forward (exported only then: the joint
    graph records neither)."""
    nodes = [n for n in joint.graph.nodes if n.op == "call_function"]
    checks = check_nodes(joint.graph)  # not lowered
    for node in nodes:
        name = str(node.target)
        if lookup(name) is not None or node.target is operator.getitem or node in checks:
            continue
        try:
            with sdpa_kernel(SDPBackend.MATH):
                forward = torch.export.export(module, batch, strict=False)
        except Exception:  # noqa: BLE001 - the op is still named, without its place
            raise CompileError(f"no lowering for ATen op '{name}'") from None
        origin = _forward_op(node, nodes, forward)
        if origin is None:
            raise CompileError(f"no lowering for ATen op '{name}'")
        stack = list((origin.meta.get("nn_module_stack") or {}).values())
        path, cls = stack[-1] if stack else ("", "")
        where = f"{_strip(path) or 'the model'} ({str(cls).rsplit('.', 1)[-1]})"
        line = f"\n  at {user_line(origin)}" if user_line(origin) else ""
        if name == str(origin.target):
            raise CompileError(f"no lowering for ATen op '{name}' in {where}{line}")
        raise CompileError(f"no gradient lowering for ATen op '{name}', the backward of "
                           f"{origin.target} in {where}{line}")


def _forward_op(node: torch.fx.Node, joint: list[torch.fx.Node],
                forward: torch.export.ExportedProgram) -> torch.fx.Node | None:
    """The forward export's node whose backward (or self) `node` of the joint graph most
    likely is: one of the joint graph's nodes of the same autograd sequence number that
    the forward export holds by name, of a related op name (max_pool2d for
    max_pool2d_with_indices_backward); else the forward export's first node of a related
    op name; else any of the same sequence number."""
    ours = {n.name: n for n in forward.graph.nodes}
    base = _op_name(str(node.target)).removesuffix("_backward")

    def related(n: torch.fx.Node) -> bool:
        other = _op_name(str(n.target))
        return base.startswith(other) or other.startswith(base)

    seq = node.meta.get("seq_nr")
    same = [ours[n.name] for n in joint if seq is not None and n is not node
            and n.meta.get("seq_nr") == seq and n.name in ours]
    calls = [n for n in forward.graph.nodes if n.op == "call_function"]
    for n in [n for n in same if related(n)] + [n for n in calls if related(n)] + same:
        return n
    return None


def _op_name(target: str) -> str:
    """An ATen op's name without namespace, overload and leading underscores."""
    parts = target.split(".")
    return (parts[1] if len(parts) > 1 else parts[0]).lstrip("_")


class TrainingStep:
    """A compiled training step: `step(*batch)` runs forward, loss, backward and the
    optimizer update on the GPU and returns the loss (a float). Parameters and optimizer
    state stay on the GPU; `state_dict()` reads the parameters (and buffers) back,
    `sync_to(model)` copies them into a model, `optimizer_state()` reads the optimizer's
    state. The learning rates are read at every step: `lrs`, one per param group (a
    torch.optim optimizer's `param_groups[i]["lr"]`, which its schedulers set), `lr` the
    first group's, and setting `lr` (or passing `lr_schedule`: step number -> learning
    rate) sets every group's. A step whose loss or gradient is not finite changes
    nothing (parameters, optimizer state, buffers): it raises FloatingPointError, or,
    with `skip_nonfinite`, is counted in `skipped` and returns the loss. With
    `accumulate` N > 1 each call is one micro-batch: its gradient, divided by N, is added
    to a GPU-resident sum, and every N-th call applies the update from that sum (as
    PyTorch's loop of N `(loss / N).backward()` then `optimizer.step()`). Random ops
    (dropout in training mode) draw from `seed` and the call number `draws`, passed per
    call: each call draws anew, the same seed draws the same. `save(path)` and
    `load(path)` write and restore the whole training state (one safetensors file)."""

    def __init__(self, compiled: CompiledModule, groups: ParamGroups,
                 params: dict[str, str], optim_state: dict[str, tuple[str, str]],
                 buffers: dict[str, str], skip_nonfinite: bool,
                 lr_schedule: Callable[[int], float] | None, accumulate: int = 1,
                 random: bool = False, seed: int = 0,
                 torch_optimizer: torch.optim.Optimizer | None = None) -> None:
        self.compiled = compiled
        # a torch.optim optimizer passed to compile_training: its groups' lr is the step's
        self.torch_optimizer = torch_optimizer
        # its groups' parameters when compiled (checked at each step, with their settings)
        self._members = None if torch_optimizer is None else \
            [[id(p) for p in group["params"]] for group in torch_optimizer.param_groups]
        self.random = random  # whether the plan takes a random key (it has random ops)
        self.seed = seed
        self.draws = 0  # calls that drew random numbers so far
        self.groups = groups  # each param group's settings and parameters
        self.accumulate = accumulate
        self.micro = 0  # micro-batches summed since the last update (accumulate > 1)
        self.lr_schedule = lr_schedule
        self.skip_nonfinite = skip_nonfinite
        self._params = params  # the parameter's name -> its name in Plan.state
        self._optim_state = optim_state  # Plan.state name -> (parameter, state name)
        self._buffers = buffers  # buffer's name -> Plan.state name
        self.steps = 0  # updates applied
        self.skipped = 0  # steps skipped for a non-finite loss or gradient
        self.grad_norm: float | None = None  # the last step's global gradient norm

    @property
    def lrs(self) -> list[float]:
        """Each param group's learning rate for the next step: a torch.optim optimizer's
        `param_groups[i]["lr"]` (which torch's schedulers set), read at each step, its
        groups' other settings and parameters checked unchanged since compiling; else the
        kernelwright optimizer's `lr`."""
        if self.torch_optimizer is not None:
            self._check_torch_groups()
            return [float(group["lr"]) for group in self.torch_optimizer.param_groups]
        return [float(opt.lr) for opt in self.groups.optimizers]

    @lrs.setter
    def lrs(self, values: list[float]) -> None:
        if len(values) != len(self.groups.optimizers):
            raise ValueError(f"{len(values)} learning rates for "
                             f"{len(self.groups.optimizers)} param groups")
        for i, (opt, value) in enumerate(zip(self.groups.optimizers, values)):
            opt.lr = float(value)
            if self.torch_optimizer is not None:
                self.torch_optimizer.param_groups[i]["lr"] = float(value)

    @property
    def lr(self) -> float:
        """The first param group's learning rate for the next step (the only one's, without
        groups); setting it sets every group's."""
        return self.lrs[0]

    @lr.setter
    def lr(self, value: float) -> None:
        self.lrs = [float(value)] * len(self.groups.optimizers)

    def _check_torch_groups(self) -> None:
        """A ValueError where the torch.optim optimizer's param groups changed since
        compiling in anything but their lr (a setting, a group added, a parameter moved):
        the compiled update holds them."""
        opt = self.torch_optimizer
        if [[id(p) for p in group["params"]] for group in opt.param_groups] != self._members:
            raise ValueError(f"the {type(opt).__name__} optimizer's param groups or their "
                             "parameters changed since compile_training: compile again")
        for i, (now, then) in enumerate(zip(torch_settings(opt), self.groups.optimizers)):
            for f in dataclasses.fields(then):
                if f.name != "lr" and getattr(now, f.name) != getattr(then, f.name):
                    raise ValueError(
                        f"param group {i}'s {f.name} changed from {getattr(then, f.name)!r} to "
                        f"{getattr(now, f.name)!r} since compile_training; only the lr is read "
                        "at each step: compile again")

    @property
    def plan(self) -> Plan:
        return self.compiled.plan

    def __call__(self, *batch) -> float:
        args, apply = self._call_args(batch)
        loss, norm, ok = self.compiled(*args)
        return self._account(float(loss), float(norm), bool(ok), apply)

    def kernel_times_ms(self, *batch) -> list[tuple[str, float]]:
        """GPU time of each kernel of one step on `batch`, by the plan's kernel names
        (CompiledModule.kernel_times_ms: timestamps around each kernel, one compute pass
        per kernel). The timed call is a step: it updates parameters, optimizer state and
        counters as calling the step does (a non-finite step raises or is skipped alike)."""
        return self._measured(batch, lambda args: self.compiled.kernel_times_ms(*args))

    def gpu_time_ms(self, *batch) -> float:
        """GPU time of one step on `batch`, its kernels in one compute pass
        (CompiledModule.gpu_times_ms: timestamps around the pass); a step, as
        kernel_times_ms's timed call is."""
        return self._measured(batch, lambda args: self.compiled.gpu_times_ms([args], 1)[0])

    def _measured(self, batch: tuple, measure: Callable):
        """`measure(the plan's arguments)` for one step on `batch`, then the step counted
        from the outputs it left on the GPU; returns what `measure` returned."""
        args, apply = self._call_args(batch)
        result = measure(args)
        loss, norm, ok = self.compiled.exe.read_all(self.plan.outputs)
        self._account(float(loss), float(norm), bool(ok), apply)
        return result

    def _call_args(self, batch: tuple) -> tuple[tuple, bool]:
        """The compiled plan's arguments for one step on `batch` (the batch, the random key,
        the per-step scalars: learning rate, bias corrections, apply), and whether the
        step applies the update (the last micro-batch of an accumulation)."""
        if self.lr_schedule is not None:
            self.lr = float(self.lr_schedule(self.steps))
        hyper = self.groups.hyper(self.lrs, self.steps + 1) or [0.0]
        apply = self.micro + 1 == self.accumulate
        if self.accumulate > 1:
            hyper = hyper + [1.0 if apply else 0.0]
        hyper_t = torch.tensor(hyper, dtype=torch.float32)
        key = (key_tensor(self.seed, self.draws),) if self.random else ()
        self.draws += int(self.random)
        return (*batch, *key, hyper_t), apply

    def _account(self, loss: float, norm: float, ok: bool, apply: bool) -> float:
        """Count a step the GPU ran (its loss, gradient norm, whether both were finite);
        a non-finite one is skipped or raises FloatingPointError. Returns the loss."""
        self.grad_norm = norm
        if ok:
            self.micro = 0 if apply else self.micro + 1
            self.steps += int(apply)
        elif self.skip_nonfinite:
            self.skipped += 1
        else:
            raise FloatingPointError(
                f"step {self.steps + self.skipped}: the loss ({loss}) or the gradient "
                f"norm ({self.grad_norm}) is not finite; parameters and optimizer state are "
                "left as they were before this step (compile_training(skip_nonfinite=True) "
                "skips such steps)")
        return loss

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's parameters and updated buffers as the GPU holds them, named as in
        model.state_dict()."""
        state = self.compiled.state()
        out = {name: state[key] for name, key in self._params.items()}
        out.update({name: state[key] for name, key in self._buffers.items()})
        return out

    def optimizer_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The optimizer's state per parameter name, as torch.optim names it."""
        state = self.compiled.state()
        out: dict[str, dict[str, torch.Tensor]] = {}
        for key, (param, name) in self._optim_state.items():
            out.setdefault(param, {})[name] = state[key]
        return out

    def sync_to(self, model: torch.nn.Module) -> None:
        """Copy the trained parameters and buffers into `model` (in place)."""
        own = dict(model.named_parameters()) | dict(model.named_buffers())
        with torch.no_grad():
            for name, t in self.state_dict().items():
                own[name].copy_(t.reshape(own[name].shape))

    def _settings(self) -> dict:
        """What a checkpoint must agree with to be loaded into this step: the optimizer,
        each param group's settings but its lr, the accumulation, and (checked after the
        model's tensors, which tell another model) each group's trained parameters."""
        grouping = [sorted(n for n in self._params if self.groups.group(n) == i)
                    for i in range(len(self.groups.optimizers))]
        return {"optimizer": type(self.groups.optimizers[0]).__name__,
                "groups": self.groups.settings(), "accumulate": self.accumulate,
                "grouping": grouping}

    def save(self, path: str | Path) -> None:
        """Write the training state to one safetensors file: every GPU state tensor
        (parameters, buffers, optimizer state, a partial gradient sum), and in its metadata
        the update count (Adam's bias corrections), each group's learning rate and the
        settings."""
        meta = {"format": CHECKPOINT_FORMAT, "steps": self.steps, "skipped": self.skipped,
                "micro": self.micro, "lrs": self.lrs, "seed": self.seed, "draws": self.draws,
                **self._settings()}
        tensors = {k: t.contiguous() for k, t in self.compiled.state().items()}
        save_file(tensors, str(path), metadata={"kernelwright": json.dumps(meta)})

    def load(self, path: str | Path) -> None:
        """Restore the training state `save` wrote, into the GPU state of this step (compiled
        for the same model, param groups, optimizer settings and accumulation), each
        group's learning rate included (set into a torch.optim optimizer's groups too). A
        file that is not such a checkpoint, or one of another model, grouping or optimizer,
        is a ValueError naming it."""
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = json.loads((f.metadata() or {})["kernelwright"])
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except FileNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - any damage: a clear error naming the file
            raise ValueError(f"{path}: not a readable kernelwright training checkpoint "
                             f"({type(e).__name__}: {e})") from e
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path}: checkpoint format {meta.get('format')!r}, expected "
                             f"{CHECKPOINT_FORMAT!r}")
        ours = self._settings()
        grouping = ours.pop("grouping")
        for key, want in ours.items():
            got = meta.get(key)
            if json.loads(json.dumps(want)) != got:
                raise ValueError(f"{path}: the checkpoint's {key} is {got}, this step's {want}")
        specs = dict(self.plan.state)
        if set(tensors) != set(specs):
            missing, extra = sorted(set(specs) - set(tensors)), sorted(set(tensors) - set(specs))
            raise ValueError(f"{path}: the checkpoint's tensors do not match this model "
                             f"(missing {missing[:5]}, unexpected {extra[:5]})")
        for name, spec in specs.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(spec.shape) or \
                    str(t.dtype).removeprefix("torch.") != spec.torch_dtype:
                raise ValueError(f"{path}: tensor {name} is {t.dtype}{list(t.shape)}, this "
                                 f"model's is {spec.torch_dtype}{list(spec.shape)}")
        got = meta.get("grouping") or []
        if got != grouping:
            i = next((i for i, (a, b) in enumerate(zip(got, grouping)) if a != b), 0)
            raise ValueError(f"{path}: the checkpoint's param group {i} holds "
                             f"{got[i] if got else None}, this step's {grouping[i]}")
        self.compiled.load_state({name: tensors[name] for name in specs})
        self.steps, self.skipped = int(meta["steps"]), int(meta["skipped"])
        self.micro, self.lrs = int(meta["micro"]), [float(x) for x in meta["lrs"]]
        self.seed = int(meta.get("seed", self.seed))
        self.draws = int(meta.get("draws", 0))


def compile_training(model: torch.nn.Module, example_batch, loss_fn: Callable | None,
                     optimizer: Optimizer | torch.optim.Optimizer,
                     max_grad_norm: float | None = None,
                     skip_nonfinite: bool = False,
                     lr_schedule: Callable[[int], float] | None = None,
                     device: Device | None = None, accumulate: int = 1,
                     seed: int | None = None) -> TrainingStep:
    """Compile one training step of `model` for batches shaped like `example_batch` (a
    tuple: the model's inputs, then the target `loss_fn(output, target)` compares with;
    without a loss_fn the model returns the loss itself). The model is traced in its
    current mode (call model.train() for batch norm's batch statistics). The step clips
    the gradients to a global 2-norm of `max_grad_norm` when given
    (torch.nn.utils.clip_grad_norm_) and applies `optimizer` (kernelwright.optim.SGD,
    Adam, AdamW, or torch.optim's over all the model's trainable parameters: each
    parameter is updated with its param group's settings, and each group's lr, set by
    hand or a torch scheduler, is read at each step; its own state is not used or
    updated). With `accumulate` N > 1 each call
    is one micro-batch and every N-th call updates from the mean of their gradients.
    Dropout (and other random ops) draw from `seed` (None: one drawn from torch's default
    generator, so torch.manual_seed makes a run repeatable), anew at every call. See
    TrainingStep for calling it."""
    torch_optimizer = optimizer if isinstance(optimizer, torch.optim.Optimizer) else None
    dev = device or default_device()
    try:
        limits = dev.binding_limits
    except Exception:  # noqa: BLE001 - no adapter: plan without a device's limits
        limits = None
    options = CompileOptions("strict", device_waves(dev), limits, choose_knobs)
    planned = plan_training(model, example_batch, loss_fn, optimizer, options,
                            max_grad_norm, accumulate)
    compiled = CompiledModule(planned.plan, dev)
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    return TrainingStep(compiled, planned.groups, planned.params, planned.optim_state,
                        planned.buffers, skip_nonfinite, lr_schedule, accumulate,
                        random=planned.random, seed=seed, torch_optimizer=torch_optimizer)


@dataclasses.dataclass
class PlannedStep:
    """A training step's plan before any device holds it (plan_training): the plan, the
    param groups' settings it applies, and the names TrainingStep reads the state by."""

    plan: Plan
    groups: ParamGroups
    params: dict[str, str]  # the parameter's name -> its name in Plan.state
    optim_state: dict[str, tuple[str, str]]  # Plan.state name -> (parameter, state name)
    buffers: dict[str, str]  # buffer's name -> Plan.state name
    random: bool  # whether the plan takes a random key


def plan_training(model: torch.nn.Module, example_batch, loss_fn: Callable | None,
                  optimizer: Optimizer | torch.optim.Optimizer, options: CompileOptions,
                  max_grad_norm: float | None = None, accumulate: int = 1) -> PlannedStep:
    """The plan of one training step (compile_training's arguments), built for `options`
    (its binding limits, waves and knob chooser) without a device: nothing is allocated,
    so a step planned for a larger device than this one can be measured
    (tools/plan_memory.py)."""
    if accumulate < 1:
        raise ValueError(f"accumulate must be at least 1, got {accumulate}")
    if isinstance(optimizer, torch.optim.Optimizer):
        groups = from_torch(optimizer, model)
    elif isinstance(optimizer, Optimizer):
        groups = ParamGroups.single(optimizer)
    else:
        raise TypeError(f"optimizer must be a kernelwright.optim or torch.optim optimizer, "
                        f"got {type(optimizer).__name__}")
    batch = tuple(example_batch) if isinstance(example_batch, (tuple, list)) \
        else (example_batch,)
    with _collector_paused():  # as compile's planning: the graphs are all alive until planned
        joint = capture_joint(model, batch, loss_fn)
        (b, torch_dtypes), (params, optim_state, buffers) = _joint_graph(
            joint, groups, max_grad_norm, accumulate, options)
        recompute_late_reads(b.graph)
        plan = build_plan(b.graph, "tuple", torch_dtypes, options)
    plan.scalars = {}
    return PlannedStep(plan, groups, params, optim_state, buffers, b.random_key is not None)


def _strip(target: str) -> str:
    """A WithLoss state name as the model names it."""
    return target.removeprefix("model.")


def _joint_graph(joint: Joint, groups: ParamGroups,
                 max_grad_norm: float | None, accumulate: int = 1,
                 options: CompileOptions | None = None):
    """The IR graph of a training step from the joint export: outputs (loss, global
    gradient norm, whether the loss and gradient were finite) and the state updates of
    parameters, optimizer state and buffers. With `accumulate` > 1 the gradient is
    added, divided by `accumulate`, to a state sum per parameter, and parameters and
    optimizer state change only where the last per-step scalar ("apply") is 1, which
    also restarts the sums. Each parameter is updated with its param group's settings
    and per-step scalars (`ParamGroups.hyper_slots`). `options`: what the step's kernels
    are generated for."""
    for name, target in joint.params.items():
        if not joint.constants[name].dtype.is_floating_point:
            raise CompileError(f"parameter {_strip(target)} is {joint.constants[name].dtype}: "
                               "only floating-point parameters are trained")
    b, torch_dtypes = fx_to_ir(joint.graph_module, joint.constants,
                               [joint.loss] + [i for i, _ in joint.grads], joint.mutations,
                               state=frozenset(joint.params), options=options, random=True)
    loss, *grads = b.graph.outputs
    b.graph.outputs = []
    by_name = {v.name: v for n in b.graph.nodes for v in n.inputs if v.kind == "const"}
    placeholder = {target: name for name, target in joint.params.items()}

    size, slots = groups.hyper_slots()
    size = max(size, 1)  # an optimizer without per-step scalars: one unused
    hyper = b.input((size + int(accumulate > 1),), "f32", "hyper")
    torch_dtypes[hyper] = "float32"
    scalars = [b.reshape(b.slice(hyper, 0, i, i + 1), ()) for i in range(hyper.shape[0])]
    group_h = [{n: scalars[i] for n, i in index.items()} for index in slots]

    trained = []  # (parameter name, its constant, its gradient)
    for (_, target), g in zip(joint.grads, grads):
        p = by_name.get(placeholder[target])
        if p is None:
            raise CompileError(f"parameter {_strip(target)} has a gradient but the graph never "
                               "reads it")
        trained.append((_strip(target), p, b.cast(g, "f32")))

    sums = []  # (the gradient sum's state, its new value) per parameter
    if accumulate > 1:
        summed = []
        for name, p, g in trained:
            acc = b.const(np.zeros(p.shape, np.float32), "f32", f"{name}:grad_sum", state=True)
            new = b.ew("add", acc, b.ew("mul", g, b.scalar(1.0 / accumulate)))
            sums.append((acc, new))
            summed.append((name, p, new))
        trained = summed

    squares = [b.reduce(b.ew("mul", g, g), "sum", []) for _, _, g in trained]
    norms = [b.ew("sqrt", s) for s in squares]
    total_sq = _sum_tree(b, [b.ew("mul", n, n) for n in norms]) if norms else b.scalar(0.0)
    norm = b.ew("sqrt", total_sq)
    ok = b.ew("not", b.ew("or", _nonfinite(b, norm), _nonfinite(b, b.cast(loss, "f32"))),
              dtype="bool")
    if max_grad_norm is not None:
        coef = b.ew("div", b.scalar(float(max_grad_norm)),
                    b.ew("add", norm, b.scalar(CLIP_EPS)))
        coef = b.ew("minimum", coef, b.scalar(1.0))
        trained = [(name, p, b.ew("mul", g, coef)) for name, p, g in trained]

    def guarded(old: Value, new: Value, when: Value = ok) -> Value:
        return b.ew("where", b.expand(when, old.shape), new, old, dtype=old.dtype)

    buffers = {}
    for k, (old, new) in enumerate(b.graph.updates):  # buffers changed by forward
        b.graph.updates[k] = (old, guarded(old, new))
        buffers[_strip(old.name)] = old.name
    update = ok
    if accumulate > 1:
        apply = b.ew("gt", scalars[size], b.scalar(0.5), dtype="bool")
        update = b.ew("and", ok, apply, dtype="bool")
        for acc, new in sums:  # restarted by an update, else the new sum
            b.graph.updates.append((acc, guarded(acc, guarded(new, b.scalar(0.0), apply))))

    params, optim_state = {}, {}
    guards: set[Value] = set()  # the states' guarded new values (Optimizer.update's `kept`)

    def kept(old: Value, new: Value) -> Value:
        out = guarded(old, new, update)
        guards.add(out)
        return out

    for name, p, g in trained:
        group = groups.group(name)
        optimizer = groups.optimizers[group]
        states = [b.const(np.zeros(p.shape, np.float32), "f32", f"{name}:{s}", state=True)
                  for s in optimizer.state_names()]
        new_p, new_states = optimizer.update(b, p, g, states, group_h[group], kept)
        p.name = name
        params[name] = name
        b.graph.updates.append((p, guarded(p, new_p, update)))
        for s, new_s, sname in zip(states, new_states, optimizer.state_names()):
            if new_s not in guards:
                raise CompileError(f"{type(optimizer).__name__}.update returned the state "
                                   f"{sname} without passing it through `kept`")
            b.graph.updates.append((s, new_s))
            optim_state[s.name] = (name, sname)
    outputs = [b.ew("copy", b.cast(loss, "f32")), b.ew("copy", norm), b.ew("copy", ok)]
    for v, dt in zip(outputs, ("float32", "float32", "bool")):
        torch_dtypes[v] = dt
    b.graph.outputs = outputs
    return (b, torch_dtypes), (params, optim_state, buffers)


def _nonfinite(b: GraphBuilder, x: Value) -> Value:
    return b.ew("or", b.ew("isnan", x, dtype="bool"), b.ew("isinf", x, dtype="bool"),
                dtype="bool")


def _sum_tree(b: GraphBuilder, xs: list[Value]) -> Value:
    """The sum of `xs`, added pairwise."""
    while len(xs) > 1:
        xs = [b.ew("add", xs[i], xs[i + 1]) if i + 1 < len(xs) else xs[i]
              for i in range(0, len(xs), 2)]
    return xs[0]

