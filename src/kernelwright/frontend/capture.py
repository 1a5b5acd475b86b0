"""Capture: a PyTorch module to the IR graph.

`trace_graph` traces a module once into core ATen (compile's capture); `export_graph`
runs torch.export and decomposes to core ATen, where the trace cannot capture a module
(a Python number among its inputs, a forward that assigns a tensor attribute) or for a
CompileError's source line (the trace's nodes carry none); `fx_to_ir` walks the
ATen FX graph and lowers each node through the op registry. Parameters, buffers
and lifted constants become IR constants (uploaded to the GPU once, when the plan
is loaded); user inputs become graph inputs, Python numbers among them constants. An
op with no registry entry, or a lowering whose result shape differs from what PyTorch
recorded, is a CompileError naming the op and the user's source line; so is an input or
a weight the graph updates with a dimension of size 0. Other empty tensors are empty IR
values, which no kernel computes (ir.py); an op whose results are all empty is not
lowered (`_empty_results`). float64 is computed as f32, with a warning. Plain tensor
attributes are exported as buffers (`export_graph`: a forward that changes one is
captured, computed from the value at compile time).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import logging
import math
import operator
import re
import warnings

import numpy as np
import torch
import torch._decomp.decompositions
import torch.fx
from torch._decomp import decomposition_table as torch_table
from torch.export.graph_signature import ConstantArgument
from torch.nn.modules.module import register_module_buffer_registration_hook
from torch.utils import _pytree as pytree

from ..dtypes import default_torch_name, fills_words, host_array, is_packed, storage_of_torch
from ..ir.ir import CompileError, GraphBuilder, Value
from ..lower.elementwise import device_dtype
from ..lower.linalg import merge_shared_products
from ..lower.registry import lookup
from ..options import CompileOptions


def user_line(node: torch.fx.Node) -> str:
    """The innermost frame of the user's code in the node's stack trace."""
    trace = node.meta.get("stack_trace") or ""
    frames = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
    code = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().strip("^~")
            and not ln.strip().startswith("File ")]  # no caret lines under the code
    if frames:
        where = frames[-1].replace("File ", "")
        return f"{where}: {code[-1]}" if code else where
    return ""


def export_graph(module: torch.nn.Module, example_inputs,
                 keep_recurrent: bool = True) -> torch.export.ExportedProgram:
    """The module's core ATen graph. With `keep_recurrent`, the recurrent layers' ops
    (RECURRENT) stay whole, lowered by lower/recurrent.py; else torch's decomposition
    unrolls them here (what lower/recurrent.py reproduces: tests/test_recurrent.py compares
    the two). Plain tensor attributes (neither parameters nor registered
    buffers) become buffers of a shallow copy first (`with_state_buffers`), so that a
    forward that assigns to one (an RNN cell's `self.hidden = tanh(...)`) or changes it in
    place, which torch.export refuses for a constant, is captured. torch.export records
    such a change, like one of a registered buffer, as a new value of the buffer that
    the compiled module carries to its next call (Captured.mutations, Graph.updates),
    but an assignment inside a submodule's forward it does not record: that one is read
    at its compile-time value on every call, and export_graph warns so. The user's module
    is left as it was."""
    wrapped, attrs = with_state_buffers(module)
    reassigned: set[str] = set()
    with lstm_state_shapes(), recurrent_shapes(keep_recurrent):
        hook = _watch_assignments(attrs, reassigned)
        try:
            ep = torch.export.export(wrapped, tuple(example_inputs), strict=False)
        except Exception as e:
            try:  # the attributes as they were (a forward that sets one to a non-tensor)
                ep = None if wrapped is module else torch.export.export(
                    module, tuple(example_inputs), strict=False)
            except Exception:  # noqa: BLE001 - the first error is the one to report
                ep = None
            if ep is None:
                raise CompileError(f"torch.export could not capture {type(module).__name__}: "
                                   f"{e}") from e
        finally:
            hook.remove()
        with warnings.catch_warnings():  # torch 2.13's own use of its deprecated LeafSpec
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                                    category=FutureWarning)
            ep = ep.run_decompositions(decomposition_table(keep_recurrent))
        sig = ep.graph_signature
        lost = sorted(reassigned - set(sig.buffers_to_mutate.values()))
        if lost:
            warnings.warn(
                f"{type(module).__name__}.forward changes its tensor attribute(s) "
                f"{', '.join(lost)} in a submodule's forward, which torch.export does not "
                "record: the compiled module reads their values at compile time on every "
                "call (eager's first call); register them as buffers changed in place, or "
                "pass such state as an input and return its new value", stacklevel=2)
        return ep


def _watch_assignments(attrs: dict[str, tuple[torch.nn.Module, str]], reassigned: set[str]):
    """A hook (remove it after the capture) adding to `reassigned` the name of each
    tensor attribute of `attrs` (with_state_buffers') that forward assigns a new tensor."""
    owners = {(id(m), k): name for name, (m, k) in attrs.items()}

    def on_assign(m: torch.nn.Module, k: str, value) -> None:
        name = owners.get((id(m), k))
        if name is not None and value is not m._buffers.get(k):
            reassigned.add(name)

    return register_module_buffer_registration_hook(on_assign)


@dataclasses.dataclass
class Captured:
    """A module's core ATen graph and what compile needs around it: `constants`
    (placeholder -> the parameter, buffer or lifted constant it stands for), `weights`
    (the parameters and persistent buffers among them, by name: compile checks that they
    do not change), `scalars` (user input position -> the Python number it was),
    `user_outputs` (the graph outputs the caller sees), `mutations` (an output that is a
    buffer's or input's new value: output index -> (placeholder, the tensor's name)) and
    `out_spec` (the module's output structure) and `names` (the placeholder of each
    parameter and buffer -> its name in the module)."""

    graph_module: torch.fx.GraphModule
    constants: dict[str, torch.Tensor]
    weights: list[tuple[str, torch.Tensor]]
    scalars: dict[int, object]
    user_outputs: list[int]
    mutations: dict[int, tuple[str, str]]
    out_spec: object
    names: dict[str, str] = dataclasses.field(default_factory=dict)


def from_exported(ep: torch.export.ExportedProgram) -> Captured:
    """An exported program (export_graph's) as a Captured."""
    sig = ep.graph_signature
    constants, weights = {}, []
    for spec in sig.input_specs:
        if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            t = ep.state_dict.get(spec.target)
            if t is None:
                t = ep.constants[spec.target]
            else:
                weights.append((spec.target, t))
            constants[spec.arg.name] = t
    user_inputs = [spec for spec in sig.input_specs if spec.kind.name == "USER_INPUT"]
    scalars = {i: spec.arg.value for i, spec in enumerate(user_inputs)
               if isinstance(spec.arg, ConstantArgument)}
    user_outputs = [i for i, spec in enumerate(sig.output_specs)
                    if spec.kind.name == "USER_OUTPUT"]
    placeholder = {spec.target: spec.arg.name for spec in sig.input_specs
                   if spec.kind.name == "BUFFER"}
    mutations = {}
    for i, spec in enumerate(sig.output_specs):
        if spec.kind.name == "BUFFER_MUTATION":
            mutations[i] = (placeholder[spec.target], spec.target)
        elif spec.kind.name == "USER_INPUT_MUTATION":
            mutations[i] = (spec.target, spec.target)
    names = {spec.arg.name: spec.target for spec in sig.input_specs
             if spec.kind.name in ("PARAMETER", "BUFFER")}
    return Captured(ep.graph_module, constants, weights, scalars, user_outputs, mutations,
                    ep.call_spec.out_spec, names)


def trace_graph(module: torch.nn.Module, example_inputs) -> Captured | None:
    """The module's core ATen graph from one functionalized trace under fake tensors
    (AOTAutograd's aot_export_joint_with_descriptors under no_grad, as the training
    capture's, with capture's decompositions applied while tracing, the KEEP_WHOLE ops
    kept as torch.export keeps them, and TRACE_KEEPS_WHOLE): export_graph traces every op
    twice (torch.export, then run_decompositions' retrace) and keeps bookkeeping nothing
    here reads. The module's code sees torch.export's flags (torch.compiler.is_exporting
    and is_compiling, set as torch.export's own trace sets them: _compiling_state_context)
    and takes the branches it takes under export: transformers skips its data-dependent
    checks (of the position ids: a fake tensor has no values to branch on) and repeats
    the keys of grouped-query attention. torch.export's checks (_assert_tensor_metadata)
    are not in the graph. Its nodes carry no source lines (on a
    CompileError while lowering, compile exports the module for the message). None where
    this torch has no such trace, an input is not a tensor (a Python number export bakes
    in), forward assigns a new tensor to an attribute (which the trace would not carry to
    the next call) or the trace fails: export_graph then."""
    try:  # private torch APIs, present in some versions only: imported where needed
        from torch._export.utils import _compiling_state_context
        from torch._functorch._aot_autograd import descriptors as desc
        from torch._functorch.aot_autograd import aot_export_joint_with_descriptors
        from torch.export.exported_program import (
            _override_composite_implicit_decomp,
            _split_decomp_table_to_cia_and_python_decomp,
        )
    except ImportError:
        return None
    args = tuple(example_inputs)
    if not all(isinstance(a, torch.Tensor) for a in pytree.tree_leaves(args)):
        return None
    wrapped, attrs = with_state_buffers(module)
    # torch.export's split: the CompositeImplicitAutograd ops of the table decomposed (or
    # kept, KEEP_WHOLE) at dispatch, the rest by the trace's decompositions
    cia, table = _split_decomp_table_to_cia_and_python_decomp(
        dict(decomposition_table(keep=TRACE_KEEPS_WHOLE)))
    quiet = {k: True for k in ("_disable_torch_fn_metadata_mode",)
             if k in inspect.signature(aot_export_joint_with_descriptors).parameters}
    reassigned: set[str] = set()
    hook = _watch_assignments(attrs, reassigned)
    try:
        with contextlib.ExitStack() as stack, torch.no_grad(), lstm_state_shapes(), \
                recurrent_shapes(), _override_composite_implicit_decomp(cia), \
                _quiet_fake_tensor_errors(), _compiling_state_context():
            joint = aot_export_joint_with_descriptors(stack, wrapped, args, decompositions=table,
                                                      **quiet)
    except Exception:  # noqa: BLE001 - export_graph captures it, or says why it cannot
        return None
    finally:
        hook.remove()
    if reassigned:  # a new tensor assigned to an attribute: the trace does not carry it,
        return None  # export_graph does (or warns that it cannot)
    gm = joint.graph_module
    own = dict(wrapped.named_parameters(remove_duplicate=False)) | \
        dict(wrapped.named_buffers(remove_duplicate=False))
    persistent = set(wrapped.state_dict(keep_vars=True))
    inputs = input_names(module, args)
    exported = {}  # placeholder -> torch.export's name for it
    for node in gm.graph.find_nodes(op="placeholder"):
        d = node.meta.get("desc")
        if isinstance(d, desc.ParamAOTInput):
            exported[node] = "p_" + _identifier(d.target)
        elif isinstance(d, desc.BufferAOTInput):
            exported[node] = "b_" + _identifier(d.target)
        elif isinstance(d, desc.PlainAOTInput):
            exported[node] = inputs[d.idx]
        else:
            return None
    _rename_placeholders(gm, exported)
    constants, weights, placeholder = {}, [], {}
    for node in gm.graph.find_nodes(op="placeholder"):
        d = node.meta["desc"]
        if isinstance(d, (desc.ParamAOTInput, desc.BufferAOTInput)):
            t = own[d.target]  # the module's own tensor: changed_weights sees `p.data = ...`
            constants[node.name] = t.detach()
            if d.target in persistent:
                weights.append((d.target, t))
            placeholder[d.target] = node.name
        else:
            placeholder[d.idx] = node.name
    user_outputs, mutations = [], {}
    for i, d in enumerate(gm.graph.output_node().meta.get("desc") or []):
        if isinstance(d, desc.PlainAOTOutput):
            user_outputs.append(i)
        elif isinstance(d, desc.InputMutationAOTOutput) and isinstance(
                d.mutated_input, desc.BufferAOTInput):
            mutations[i] = (placeholder[d.mutated_input.target], d.mutated_input.target)
        elif isinstance(d, desc.InputMutationAOTOutput) and isinstance(
                d.mutated_input, desc.PlainAOTInput):
            name = placeholder[d.mutated_input.idx]
            mutations[i] = (name, name)
        else:
            return None
    names = {node: target for target, node in placeholder.items() if isinstance(target, str)}
    return Captured(gm, constants, weights, {}, user_outputs, mutations, joint.out_spec, names)


def input_names(module: torch.nn.Module, args: tuple) -> list[str]:
    """The name of each tensor among `args` (flattened as pytree flattens them) as
    torch.export names its placeholder: the forward parameter's name, then the path to
    the tensor inside it (`xs_0`, `batch_image`), lower case; `arg<i>` where forward's
    signature does not take `args` or a pytree node gives no keys for its children."""
    try:
        bound = inspect.signature(module.forward).bind(*args).arguments
        return [_identifier("_".join([param, *map(_key_name, path)]))
                for param, value in bound.items()
                for path, _ in pytree.tree_flatten_with_path(value)[0]]
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(len(pytree.tree_leaves(args)))]


def _key_name(key) -> str:
    """A pytree path key's part of a name: a dict's key, a sequence's index, an
    attribute's name (pytree's MappingKey, SequenceKey, GetAttrKey)."""
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _identifier(name: str) -> str:
    """`name` as torch.export writes a placeholder's: lower case, each character that
    is not a letter or digit an underscore ("0.weight" -> "0_weight")."""
    return re.sub(r"[^a-zA-Z0-9]", "_", name).lower()


def _rename_placeholders(gm: torch.fx.GraphModule, names: dict[torch.fx.Node, str]) -> None:
    """Give placeholders the names in `names` (node and argument name), as torch.export
    does: each unique by a suffix _1, _2, ..., and another node of the same name
    (forward's argument `mul` and a multiplication) renamed the same way. The module's
    code is not regenerated (0.1-0.2 s for a language model's plan; nothing runs it):
    read the graph, not `gm.code`."""
    taken: set[str] = set()

    def unique(name: str) -> str:
        new, k = name, 0
        while new in taken:
            k += 1
            new = f"{name}_{k}"
        taken.add(new)
        return new

    for node, name in names.items():
        node.name = node.target = unique(name)
    placeholders = set(taken)
    others = [n for n in gm.graph.nodes if n not in names]
    taken |= {n.name for n in others}
    for node in others:
        if node.name in placeholders:
            node.name = unique(node.name)


def with_state_buffers(
        module: torch.nn.Module) -> tuple[torch.nn.Module, dict[str, tuple[torch.nn.Module, str]]]:
    """A shallow copy of the module tree in which every plain tensor attribute is a
    non-persistent buffer, and each such attribute's dotted name with the copy and name
    that hold it; the module itself (and none) when it has none. Copies share parameters,
    buffers and tensors with the original; only modules on the way to such an attribute
    are copied, each once."""
    names: dict[str, tuple[torch.nn.Module, str]] = {}
    copies: dict[int, torch.nn.Module] = {}

    def copy_tree(m: torch.nn.Module, prefix: str) -> torch.nn.Module:
        if id(m) in copies:
            return copies[id(m)]
        if isinstance(m, torch.fx.GraphModule):  # a traced graph: no Python attribute writes
            copies[id(m)] = m
            return m
        children = {k: copy_tree(c, f"{prefix}{k}.") for k, c in m._modules.items()
                    if c is not None}
        attrs = [k for k, v in vars(m).items() if isinstance(v, torch.Tensor)
                 and not isinstance(v, torch.nn.Parameter)]
        if not attrs and all(children[k] is c for k, c in m._modules.items()
                             if c is not None):
            copies[id(m)] = m
            return m
        c = copy.copy(m)
        c._modules = {**m._modules, **children}
        c._parameters = dict(m._parameters)
        c._buffers = dict(m._buffers)
        c._non_persistent_buffers_set = set(m._non_persistent_buffers_set)
        for k in attrs:
            c.register_buffer(k, c.__dict__.pop(k), persistent=False)
            names[prefix + k] = (c, k)
        copies[id(m)] = c
        return c

    return copy_tree(module, ""), names


# Recurrent layers' ops, kept whole through export and decomposition. torch computes
# their outputs while tracing by running their decomposition (torch/_decomp: a few ops
# per step and direction) on fake tensors, some 6 ms a step, three times over (export,
# then run_decompositions' retrace): a 6-layer bidirectional GRU over 512 steps took
# minutes. `recurrent_shapes` gives the tracer their output shapes instead.
RECURRENT = ("gru.input", "lstm.input", "rnn_tanh.input", "rnn_relu.input")


def _recurrent_ops() -> list:
    return [getattr(getattr(torch.ops.aten, n.split(".")[0]), n.split(".")[1])
            for n in RECURRENT]


def _recurrent_outputs(op_name: str):
    """A function returning empty tensors of the shapes and strides `op_name` ("gru",
    "lstm", ...) returns as torch decomposes it: the output sequence (batch_first: the
    transpose of a sequence-major one, which decides how the ops reading it decompose,
    e.g. a Linear's matmul), then the final states (the initial ones' shapes)."""
    def outputs(input, hx, params, has_biases, num_layers, dropout, train,
                bidirectional, batch_first):
        states = tuple(hx) if op_name == "lstm" else (hx,)
        features = states[0].shape[-1] * (2 if bidirectional else 1)
        if batch_first:
            seq = input.new_empty((input.shape[1], input.shape[0], features)).transpose(0, 1)
        else:
            seq = input.new_empty((*input.shape[:2], features))
        return (seq, *(s.new_empty(s.shape) for s in states))
    return outputs


@contextlib.contextmanager
def recurrent_shapes(active: bool = True):
    """While tracing, the RECURRENT ops compute only their outputs' shapes (empty
    tensors): their CompositeImplicitAutograd kernels and torch._decomp entries are
    replaced, then restored. Nothing changes when not `active`."""
    if not active:
        yield
        return
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    saved = [(op, op.py_kernels.get(key), torch_table.get(op)) for op in _recurrent_ops()]
    for op, _, _ in saved:
        fn = _recurrent_outputs(op.__name__.split(".")[0])
        op.py_kernels[key] = fn
        torch_table[op] = fn
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, kernel, decomp in saved:
            _restore(op.py_kernels, key, kernel)
            _restore(torch_table, op, decomp)
            op._dispatch_cache.clear()


def _restore(table: dict, key, old) -> None:
    if old is None:
        table.pop(key, None)
    else:
        table[key] = old


@contextlib.contextmanager
def lstm_state_shapes():
    """While exporting, each LSTM layer's final states keep the shape of its initial ones.
    torch 2.11's decomposition of aten.lstm (torch/_decomp, one_layer_lstm) squeezes them
    on dim 1 instead of 0, and as export traces with that decomposition, h_n and c_n and
    everything computed from them get a unit dim too many ([L, 1, B, H] for [L, B, H]) in
    the graph and its recorded shapes, unlike eager PyTorch. The layer functions are
    wrapped to reshape the states they return to their inputs' shapes: a no-op (no node)
    on versions that get it right."""
    decomps = torch._decomp.decompositions
    names = [n for n in ("one_layer_lstm", "mkldnn_one_layer_lstm") if hasattr(decomps, n)]
    originals = {n: getattr(decomps, n) for n in names}

    def keeping_shapes(layer):
        def run(inp, hidden, *args, **kwargs):
            out, (h, c) = layer(inp, hidden, *args, **kwargs)
            return out, (h.reshape(hidden[0].shape), c.reshape(hidden[1].shape))
        return run

    for n in names:
        setattr(decomps, n, keeping_shapes(originals[n]))
    try:
        yield
    finally:
        for n in names:
            setattr(decomps, n, originals[n])


# ATen ops kept whole through decomposition: the registry lowers each onto a template
# of its own (SDPA: the fused attention kernel, lower/attention.py) or a primitive
# (im2col, F.unfold: the window view, lower/conv.py), or whose decomposition loses what
# they know (max_unpool: each plane's indices stay in that plane, lower/pool.py; the
# decomposed index_put would search all planes; interpolation: torch's decomposition
# of nearest-exact rounds differently from its own kernel, and lower/resize.py reads the
# source positions as views or gathers of computed indices). Every overload of each.
# torch.export's table decomposes the CPU's flash attention into the math backend's ops
# (and its log-sum-exp wrongly, into the probabilities): lower/attention.py lowers it whole
KEEP_WHOLE = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "im2col", "max_unpool2d", "max_unpool3d",
              "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
              "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
              "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
              "upsample_trilinear3d", "upsample_bicubic2d")


# Kept whole by trace_graph too: lower/linalg.linear makes the matmul its decomposition
# leads to (SmolLM2-135M's generate plans: the same kernels), and torch's Python matmul
# decomposition was a quarter of the trace.
TRACE_KEEPS_WHOLE = ("linear",)


@contextlib.contextmanager
def _quiet_fake_tensor_errors():
    """torch's fake tensors log an op whose meta function raises (with its traceback)
    before raising it; trace_graph catches the error and export_graph captures the
    module instead, so the log is silenced while tracing. (torch's meta of
    aten._grouped_mm refuses float32, which its CPU kernel takes and transformers'
    grouped_mm experts pass it: export_graph then gets their fallback op.)"""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    was = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = was


def decomposition_table(keep_recurrent: bool = True, keep: tuple[str, ...] = ()) -> dict:
    """torch.export's default decompositions less the ops kept whole (KEEP_WHOLE, `keep`
    and RECURRENT with `keep_recurrent`)."""
    table = torch.export.default_decompositions()
    for name in KEEP_WHOLE + keep:
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            table.pop(getattr(packet, overload), None)
    for op in _recurrent_ops() if keep_recurrent else ():
        table.pop(op, None)
    return table


def to_device_array(t: torch.Tensor, stored: str = "") -> np.ndarray:
    """A host array in the device's layout (int64 as int32, bool as uint32); with
    `stored` a packed half type (dtypes.PACKED), the float16 or bfloat16 tensor as it
    is (its buffer's layout)."""
    if is_packed(stored):
        return host_array(t, stored)
    dt = device_dtype(t.dtype)
    t = t.detach().cpu()
    if dt == "f32":
        return t.to(torch.float32).contiguous().numpy()
    if dt == "bool":
        return t.to(torch.int32).contiguous().numpy().view(np.uint32)
    a = t.contiguous().numpy()  # the range check in numpy: no PyTorch op runs per call
    if a.dtype == np.int64 and a.size and (a.max() > 2**31 - 1 or a.min() < -(2**31)):
        raise ValueError("int64 values outside the int32 range are not supported on the device")
    return a.astype(np.int32)


# checks PyTorch made while tracing: shapes are static here, and a check of values
# (torch._check of a tensor: transformers' count of image placeholders) is not run
CHECKS = frozenset({"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
                    "aten._assert_async.msg", "aten._assert_async.default",
                    "aten.sym_constrain_range_for_size.default"})


VALUE_CHECKS = ("aten._assert_scalar.default", "aten._assert_async.msg",
                "aten._assert_async.default")


def _compare(op: str):
    return lambda b, x, y: b.ew(op, _value(b, x), _value(b, y), dtype="bool")


def _value(b: GraphBuilder, x) -> Value:
    return x if isinstance(x, Value) else b.scalar(x)


# Python's operators on a value read on the host (`_local_scalar_dense`) in a check, as
# the graph records them, computed on the 0-d value instead
_SYMBOLIC = {operator.eq: _compare("eq"), operator.ne: _compare("ne"),
             operator.lt: _compare("lt"), operator.le: _compare("le"),
             operator.gt: _compare("gt"), operator.ge: _compare("ge"),
             operator.and_: _compare("and"), operator.or_: _compare("or"),
             torch.sym_ite: lambda b, c, x, y: b.ew("where", b.cast(_value(b, c), "bool"),
                                                    _value(b, x), _value(b, y))}


def _lower_check(b: GraphBuilder, node: torch.fx.Node, env: dict, call) -> None:
    """A node of a check (check_nodes) into env where it computes a value: an assert on
    a tensor's value becomes one of the graph's checks (Graph.checks: computed by the
    call, raised where false), `_local_scalar_dense` (the value read on the host for it)
    the 0-d value itself, what computes the condition its lowering (`call`); shape and
    metadata checks (torch's at trace time) and a condition of Python values are not."""
    name = str(node.target)
    args = [env[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
    if node.target in _SYMBOLIC and all(isinstance(a, (Value, int, float, bool)) for a in args) \
            and any(isinstance(a, Value) for a in args):  # arithmetic of the host value
        env[node] = _SYMBOLIC[node.target](b, *args)
    elif name == "aten._local_scalar_dense.default":
        x = env[node.args[0]]
        if isinstance(x, Value) and x.numel == 1:
            env[node] = b.reshape(x, ())
    elif name in VALUE_CHECKS:
        cond = env[node.args[0]]
        if isinstance(cond, Value):
            message = (str(node.args[1]) if len(node.args) > 1 else "an assertion") \
                + _at(user_line(node))
            b.graph.checks.append((b.ew("copy", b.cast(cond, "bool"), dtype="bool"), message))
    elif name not in CHECKS:
        call(node)


def check_nodes(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The graph's CHECKS and the nodes computed for them alone (a check of a tensor's
    values: _is_all_true, then _local_scalar_dense, its value on the host): lowered by
    fx_to_ir where they compute a value (`_lower_check`), else left out."""
    only: set[torch.fx.Node] = set()
    for node in reversed(graph.nodes):
        if node.op == "call_function" and (str(node.target) in CHECKS or (
                node.users and all(user in only for user in node.users))):
            only.add(node)
    return only


def fx_to_ir(gm: torch.fx.GraphModule, constants: dict[str, torch.Tensor],
             keep_outputs: list[int] | None = None,
             mutations: dict[int, tuple[str, str]] | None = None,
             state: frozenset[str] = frozenset(), options: CompileOptions | None = None,
             random: bool = False, made: dict | None = None,
             shared: dict[str, str] | None = None) -> tuple[GraphBuilder, dict[Value, str]]:
    """Lower an ATen FX graph. `constants` maps placeholder names to tensors that are
    part of the model (parameters, buffers); every other placeholder is an input.
    `keep_outputs` selects the graph outputs the user sees (export also returns
    buffer mutations, e.g. batch norm's running statistics in training mode).
    `mutations` maps a graph output to the placeholder it is the new value of, and that
    tensor's name: a buffer's becomes a state update of the graph (`Graph.updates`), an
    input's a write back into the caller's tensor (`Graph.writes`). `state` names more
    constant placeholders that the caller will update (a training step's parameters):
    like those, they are read from their buffers at each call, never folded.
    `options`: what the compile generates for (GraphBuilder.options). With `random`,
    random ops (dropout in training mode, rand, bernoulli: lower/random.py) draw from a
    key input the graph gains at the first one (`GraphBuilder.random_key`, int32 [seed,
    draw], after the graph's own inputs); without, they are a CompileError. `made`:
    arrays an earlier plan made from the same weights (GraphBuilder.made). `shared`:
    constant placeholders -> their tensors' names, state that another plan sharing this
    one's (compile's share_state) updates: read from its buffer at each call, and where
    this graph does not update it, listed as state it reads (Graph.shared). Returns the
    builder holding the graph and each input/output's torch dtype."""
    b = GraphBuilder(options, made)
    b.random = random
    env: dict[torch.fx.Node, object] = {}
    torch_dtypes: dict[Value, str] = {}
    doubles: list[str] = []  # float64 inputs and weights, computed in float32

    def meta_of(node):
        val = node.meta.get("val")
        return val if isinstance(val, torch.Tensor) else None

    shared = shared or {}
    changing = {p for p, _ in (mutations or {}).values()} | set(state) | set(shared)
    checks = check_nodes(gm.graph)
    # one constant per tensor that several placeholders name (tied weights: the output
    # projection's weight is the input embedding's), so that one buffer holds it
    held: dict[tuple, object] = {}

    def constant(t: torch.Tensor, name: str, state: bool = False):
        key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if not state and key in held:
            return held[key]
        v = b.const(to_device_array(t), device_dtype(t.dtype), name, state=state)
        if not state:
            _store_as_is(v, t.dtype)
            held[key] = v
        return v

    def call(node: torch.fx.Node) -> None:  # a call_function node, lowered into env
        b.source = user_line(node)
        args = torch.fx.map_arg(node.args, lambda n: env[n])
        kwargs = torch.fx.map_arg(node.kwargs, lambda n: env[n])
        if node.target is operator.getitem:
            out = args[0][args[1]]
            if out is None:
                raise CompileError(f"output {args[1]} of {node.args[0].target} is not "
                                   f"computed by kernelwright{_at(b.source)}")
            env[node] = out
            return
        name = str(node.target)
        empty = _empty_results(b, node)
        if empty is not None:  # nothing to compute, whatever the op
            env[node] = empty
            return
        lower = lookup(name)
        if lower is None:
            raise CompileError(f"no lowering for ATen op '{name}'{_at(b.source)}")
        kwargs = {k: v for k, v in kwargs.items()
                  if k not in ("layout", "device", "pin_memory", "memory_format")}
        if getattr(lower, "reads_layout", False):  # as_strided: x's place in memory
            kwargs["layout"] = _layout(node.args[0])
        try:
            out = lower(b, *args, **kwargs)
        except CompileError as e:
            raise CompileError(f"{name}: {e}{_at(b.source)}") from e
        _check_shape(node, out, meta_of, b.source)
        env[node] = out

    for node in gm.graph.nodes:
        if node in checks:
            if node.op == "call_function" and all(n in env for n in node.all_input_nodes):
                try:
                    _lower_check(b, node, env, call)
                except CompileError:
                    pass  # a check that cannot be computed here is left out, as export does
            continue
        if node.op == "placeholder":
            val = meta_of(node)
            if node.name in constants:
                t = constants[node.name]
                if node.name in changing:
                    _check_nonempty(t, f"weight '{node.name}', which the graph updates,")
                if t.dtype == torch.float64:
                    doubles.append(f"weight '{node.name}'")
                env[node] = constant(t, node.name, state=node.name in changing)
                if node.name in changing and isinstance(env[node], Value):
                    # state: read back in its dtype
                    torch_dtypes[env[node]] = str(t.dtype).replace("torch.", "")
            elif "val" in node.meta and (node.meta["val"] is None
                                         or isinstance(node.meta["val"], (int, float, bool))):
                env[node] = node.meta["val"]  # a Python number: specialized into the plan
            elif val is None:
                raise CompileError(f"input '{node.name}' is not a tensor")
            else:
                _check_nonempty(val, f"input '{node.name}'")
                if val.dtype == torch.float64:
                    doubles.append(f"input '{node.name}'")
                v = b.input(tuple(val.shape), device_dtype(val.dtype), node.name)
                if node.name not in changing:
                    _store_as_is(v, val.dtype)
                torch_dtypes[v] = str(val.dtype).replace("torch.", "")
                env[node] = v
        elif node.op == "call_function":
            call(node)
        elif node.op == "output":
            outs = torch.fx.map_arg(node.args[0], lambda n: env[n])
            flat = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            metas = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            changed = [(flat[i], *mutations[i]) for i in sorted(mutations or {})]
            if keep_outputs is not None:
                flat = [flat[i] for i in keep_outputs]
                metas = [metas[i] for i in keep_outputs]
            # a None the module returns is its output structure's, not a tensor's
            metas = [m for v, m in zip(flat, metas) if v is not None]
            flat = [v for v in flat if v is not None]
            settled = b.single_layouts(merge_shared_products(
                b, b.stacked_steps(b.linear_recurrences(
                    b.settle(flat + [v for v, _, _ in changed])))))
            flat = settled[:len(flat)]
            by_name = {p.name: p for p in gm.graph.nodes if p.op == "placeholder"}
            for new, (_, target, name) in zip(settled[len(flat):], changed):
                old = env[by_name[target]]
                if not isinstance(new, Value) or new is old:
                    continue
                new = b.cast(b.expand(new, old.shape), old.dtype)
                packed = storage_of_torch(torch_dtypes.get(old, "")) if old.dtype == "f32" \
                    else None
                if packed and _puts_words(new, old, packed):  # written a word at a time
                    new.storage = old.storage = packed
                elif packed or old.kind != "const":
                    raw, new = new, _written(b, new, packed)
                    old.storage = packed or ""
                    if packed and new.node.inputs[0] is raw:
                        _read_narrowed(b, raw, new)
                if old.kind == "const":
                    old.name = name
                    b.graph.updates.append((old, new))
                else:
                    b.graph.writes.append((b.graph.inputs.index(old), new))
            updated = {id(old) for old, _ in b.graph.updates}
            for target, name in shared.items():
                old = env.get(by_name.get(target))
                if isinstance(old, Value) and old.kind == "const" and id(old) not in updated:
                    old.name = name
                    b.graph.shared.append(old)
            for v, m in zip(flat, metas):
                if not isinstance(v, Value):
                    raise CompileError(f"output {v!r} is not a tensor")
                if v.node is None:  # an input, constant or literal returned as is
                    v = b.ew("copy", v)
                val = meta_of(m)
                if val is not None and tuple(val.shape) != v.shape:  # a broadcast scalar
                    v = b.expand(v, tuple(val.shape))
                    v = b.ew("copy", v)
                if val is not None and storage_of_torch(val.dtype) and v.dtype == "f32":
                    v = b.materialize(v)  # narrowed into its packed buffer (_narrow)
                    v.storage = storage_of_torch(val.dtype)
                torch_dtypes[v] = str(val.dtype).replace("torch.", "") if val is not None \
                    else default_torch_name(v.dtype)
                b.graph.outputs.append(v)
        elif node.op == "get_attr":
            t = getattr(gm, node.target)
            env[node] = constant(t, node.name)
    if b.random_key is not None:
        torch_dtypes[b.random_key] = "int32"
    if doubles:
        warnings.warn(f"float64 {', '.join(doubles)} computed in float32 (kernelwright's "
                      "kernels are fp32; the outputs keep their float64 dtype)", stacklevel=3)
    return b, torch_dtypes


def _written(b: GraphBuilder, new: Value, packed: str | None) -> Value:
    """The value a call writes into a changed buffer or input: a value of its own (a
    copy of an input or constant returned as is), narrowed with `packed` (a packed half
    type) into a buffer of that type, whole words at a time (kernels/half.wgsl): the
    whole tensor is written, every word from its two elements, so a partial update (an
    index_copy of a few positions) rewrites its neighbours' halves with their own values."""
    if new.node is None:
        new = b.ew("copy", new)
    if packed:
        new = b.materialize(new)
        new.storage = packed
    return new


def _puts_words(new: Value, old: Value, packed: str) -> bool:
    """Whether a changed half buffer's new value is a put into the buffer itself whose
    slices fill whole words (an even count of elements each: a KV cache's head_dim):
    held packed, its kernel writes the new words alone (kernels/put.py), no narrowing."""
    node = new.node
    return (node is not None and node.op == "put" and node.inputs[0] is old
            and fills_words(packed, math.prod(new.shape[node.attrs["dim"] + 1:])))


def _read_narrowed(b: GraphBuilder, raw: Value, packed: Value) -> None:
    """Make the readers of `raw` (a buffer's new value, an index_copy into a KV cache
    read by attention) read `packed`, its narrowed copy, as eager's readers read the half
    buffer: one kernel writes the value (no f32 copy of the cache besides the packed one),
    its copy placed right after raw's node so that the nodes stay in order."""
    nodes = b.graph.nodes
    for n in nodes:
        if n is not packed.node:
            n.inputs = [packed if v is raw else v for v in n.inputs]
    nodes.remove(packed.node)
    nodes.insert(nodes.index(raw.node) + 1, packed.node)


def _store_as_is(v, torch_dtype) -> None:
    """Give an input or weight of float16 or bfloat16 a buffer of that type (a packed half
    type, read as f32), not f32. Inputs and weights the graph changes keep f32 buffers."""
    if isinstance(v, Value) and v.kind in ("input", "const"):
        v.storage = storage_of_torch(torch_dtype) or ""


def _layout(arg) -> tuple[list[int], int] | None:
    """The strides and storage offset PyTorch recorded for a node's tensor argument."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    return list(val.stride()), int(val.storage_offset())


def _empty_results(b: GraphBuilder, node: torch.fx.Node):
    """Empty values (ir.py) for the results of an op that PyTorch recorded all empty,
    which its lowering need not see (a softmax's row max over a zero-size dim); None
    for an op with a result that is not an empty tensor."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else (val,)
    if not vals or not all(isinstance(v, torch.Tensor)  # (a data-dependent size: no)
                           and any(type(d) is int and d == 0 for d in v.shape) for v in vals):
        return None
    empty = tuple(b.empty(tuple(v.shape), device_dtype(v.dtype)) for v in vals)
    return empty if isinstance(val, (list, tuple)) else empty[0]


def _check_nonempty(t: torch.Tensor, what: str) -> None:
    if t.numel() == 0:
        raise CompileError(f"{what} has shape {list(t.shape)}: tensors with a dimension of "
                           "size 0 are not supported")


def _at(source: str) -> str:
    return f"\n  at {source}" if source else ""


def _check_shape(node, out, meta_of, source) -> None:
    vals = node.meta.get("val")
    outs = out if isinstance(out, tuple) else (out,)
    metas = vals if isinstance(vals, (list, tuple)) else (vals,)
    for v, m in zip(outs, metas):
        if isinstance(v, Value) and isinstance(m, torch.Tensor):
            if tuple(m.shape) != v.shape:
                raise CompileError(f"lowering of {node.target} gave shape {list(v.shape)}, "
                                   f"PyTorch says {list(m.shape)}{_at(source)}")
