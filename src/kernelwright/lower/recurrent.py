"""Recurrent layers: aten.rnn_tanh / rnn_relu / lstm / gru (.input), unrolled into steps.

capture keeps these ops whole (capture.RECURRENT): torch's own decomposition
(torch/_decomp/decompositions.py) traced through torch.export costs milliseconds per
step and direction, minutes for a deep layer over a long sequence. Lowered here, they
build the ATen ops that decomposition gives after torch.export's core-ATen
decompositions, in the same order and through the same registry entries, so the IR
and the plan are those the decomposed graph gives (tests/test_recurrent.py compares
the two): per layer and direction one product for the input projection of all steps
(reversed for the reverse direction), then per step the hidden state's product with
W_hh and the gate arithmetic, a cat of the steps' outputs, and the final states
stacked.
"""

from __future__ import annotations

from ..ir.ir import GraphBuilder, Value
from .registry import lookup, register


def _aten(b: GraphBuilder, name: str, *args):
    """The registry's lowering of ATen op `name` applied to `args`."""
    return lookup(f"aten.{name}")(b, *args)


def _contiguous(v: Value) -> bool:
    """Whether PyTorch would hold `v` contiguous: a permute of its non-unit dims or a
    broadcasting expand is not (the views between the module's input and the op)."""
    node = v.node
    if node is None:
        return True
    if node.op == "permute":
        kept = [d for d in node.attrs["dims"] if node.inputs[0].shape[d] != 1]
        return kept == sorted(kept) and _contiguous(node.inputs[0])
    if node.op == "expand":
        return node.inputs[0].numel == v.numel and _contiguous(node.inputs[0])
    return True


def _linear(b: GraphBuilder, x: Value, w: Value, bias: Value | None) -> Value:
    """F.linear as ATen decomposes it: addmm for a matrix, a flattened addmm for a
    contiguous 3-d input with a bias, else matmul (folded into mm for a contiguous
    input, else bmm of expanded operands) plus the bias."""
    if len(x.shape) == 2 and bias is not None:
        return _aten(b, "addmm.default", bias, x, _aten(b, "permute.default", w, [1, 0]))
    if len(x.shape) == 3 and bias is not None and _contiguous(x):
        flat = _aten(b, "view.default", x, [x.shape[0] * x.shape[1], x.shape[2]])
        out = _aten(b, "addmm.default", bias, flat, _aten(b, "permute.default", w, [1, 0]))
        return _aten(b, "view.default", out, [x.shape[0], x.shape[1], w.shape[0]])
    wt = _aten(b, "permute.default", w, [1, 0])
    if len(x.shape) == 2:
        out = _aten(b, "mm.default", x, wt)
    elif _contiguous(x):
        flat = _aten(b, "view.default", x, [x.shape[0] * x.shape[1], x.shape[2]])
        out = _aten(b, "view.default", _aten(b, "mm.default", flat, wt),
                    [x.shape[0], x.shape[1], w.shape[0]])
    else:
        n, k = x.shape[0], x.shape[2]
        xe = _aten(b, "view.default", _aten(b, "expand.default", x, list(x.shape)),
                   list(x.shape))
        we = _aten(b, "view.default", _aten(b, "expand.default", wt, [n, k, w.shape[0]]),
                   [n, k, w.shape[0]])
        out = _aten(b, "view.default", _aten(b, "bmm.default", xe, we),
                    [n, x.shape[1], w.shape[0]])
    return out if bias is None else _aten(b, "add.Tensor", out, bias)


def _unbind(b: GraphBuilder, x: Value) -> list[Value]:
    """unbind(x, 0) as decomposed: every slice, then every squeeze."""
    pieces = [_aten(b, "slice.Tensor", x, 0, i, i + 1) for i in range(x.shape[0])]
    return [_aten(b, "squeeze.dims", p, [0]) for p in pieces]


def _chunk(b: GraphBuilder, x: Value, n: int, dim: int) -> tuple[Value, ...]:
    size = -(-x.shape[dim] // n)
    sizes = [min(size, x.shape[dim] - i) for i in range(0, x.shape[dim], size)]
    return _aten(b, "split_with_sizes.default", x, sizes, dim)


def _stack(b: GraphBuilder, xs: list[Value]) -> Value:
    """torch.stack(xs, 0) as decomposed: a cat along dim 0, then a view."""
    out = _aten(b, "cat.default", xs)
    return _aten(b, "view.default", out, [len(xs), *xs[0].shape])


def _gru_cell(b, x, h, w_hh, b_hh):
    xi = _chunk(b, x, 3, 1)
    hg = _chunk(b, _linear(b, h, w_hh, b_hh), 3, 2)
    reset = _aten(b, "sigmoid.default", _aten(b, "add.Tensor", hg[0], xi[0]))
    update = _aten(b, "sigmoid.default", _aten(b, "add.Tensor", hg[1], xi[1]))
    new = _aten(b, "tanh.default", _aten(b, "add.Tensor", xi[2],
                                         _aten(b, "mul.Tensor", hg[2], reset)))
    return _aten(b, "add.Tensor", _aten(b, "mul.Tensor", _aten(b, "sub.Tensor", h, new),
                                        update), new)


def _rnn_cell(fn: str):
    def cell(b, x, h, w_hh, b_hh):
        return _aten(b, f"{fn}.default", _aten(b, "add.Tensor", _linear(b, h, w_hh, b_hh), x))
    return cell


def _one_layer(b, x, hidden, params, has_biases, cell, reverse):
    """torch._decomp's one_layer_rnn: the output sequence and the final state."""
    w_ih, w_hh = params[0], params[1]
    b_ih, b_hh = (params[2], params[3]) if has_biases else (None, None)
    pre = _linear(b, x, w_ih, b_ih)
    if reverse:
        pre = _aten(b, "flip.default", pre, [0])
    h = _aten(b, "unsqueeze.default", hidden, 0)
    outs = []
    for step in _unbind(b, pre):
        h = cell(b, step, h, w_hh, b_hh)
        outs.append(h)
    if reverse:
        outs.reverse()
    out = _aten(b, "cat.default", outs)
    return out, _aten(b, "squeeze.dims", h, [0])


def _one_layer_lstm(b, x, hidden, params, has_biases, reverse):
    """torch._decomp's one_layer_lstm (capture.lstm_state_shapes' views included)."""
    w_ih, w_hh = params[0], params[1]
    b_ih, b_hh = (params[2], params[3]) if has_biases else (None, None)
    w_hr = params[4] if len(params) == 5 else params[2] if len(params) == 3 else None
    h = _aten(b, "unsqueeze.default", hidden[0], 0)
    c = _aten(b, "unsqueeze.default", hidden[1], 0)
    pre = _linear(b, x, w_ih, b_ih)
    if reverse:
        pre = _aten(b, "flip.default", pre, [0])
    outs = []
    for step in _unbind(b, pre):
        gates = _aten(b, "add.Tensor", _linear(b, h, w_hh, b_hh), step)
        g = _chunk(b, gates, 4, 2)
        i, f = _aten(b, "sigmoid.default", g[0]), _aten(b, "sigmoid.default", g[1])
        cell, o = _aten(b, "tanh.default", g[2]), _aten(b, "sigmoid.default", g[3])
        c = _aten(b, "add.Tensor", _aten(b, "mul.Tensor", f, c), _aten(b, "mul.Tensor", i, cell))
        h = _aten(b, "mul.Tensor", o, _aten(b, "tanh.default", c))
        if w_hr is not None:
            h = _linear(b, h, w_hr, None)
        outs.append(h)
    if reverse:
        outs.reverse()
    out = _aten(b, "cat.default", outs)
    hn, cn = _aten(b, "squeeze.dims", h, [0]), _aten(b, "squeeze.dims", c, [0])
    return out, (_aten(b, "view.default", hn, list(hidden[0].shape)),
                 _aten(b, "view.default", cn, list(hidden[1].shape)))


def _layers(b, x, hiddens, params, num_layers, bidirectional, batch_first, layer):
    """torch._decomp's _rnn_helper: the layers one after the other, each direction's
    output sequences concatenated along the features."""
    if batch_first:
        x = _aten(b, "permute.default", x, [1, 0, 2])
    finals = []
    for i in range(num_layers):
        d = 2 if bidirectional else 1
        out, h = layer(x, hiddens[d * i], params[d * i], False)
        finals.append(h)
        if bidirectional:
            back, hb = layer(x, hiddens[d * i + 1], params[d * i + 1], True)
            finals.append(hb)
            x = _aten(b, "cat.default", [out, back], 2)
        else:
            x = out
    if batch_first:
        x = _aten(b, "permute.default", x, [1, 0, 2])
    return x, finals


def _groups(params: list[Value], size: int) -> list[list[Value]]:
    return [params[i:i + size] for i in range(0, len(params), size)]


def _recurrent(cell):
    def lower(b: GraphBuilder, x, hx, params, has_biases, num_layers, dropout, train,
              bidirectional, batch_first):
        hiddens = _unbind(b, hx)
        groups = _groups(params, 4 if has_biases else 2)
        out, finals = _layers(
            b, x, hiddens, groups, num_layers, bidirectional, batch_first,
            lambda x, h, p, rev: _one_layer(b, x, h, p, has_biases, cell, rev))
        return out, _stack(b, finals)
    return lower


register("aten.gru.input")(_recurrent(_gru_cell))
register("aten.rnn_tanh.input")(_recurrent(_rnn_cell("tanh")))
register("aten.rnn_relu.input")(_recurrent(_rnn_cell("relu")))


@register("aten.lstm.input")
def lstm(b: GraphBuilder, x, hx, params, has_biases, num_layers, dropout, train,
         bidirectional, batch_first):
    projected = hx[0].shape[2] != hx[1].shape[2]
    size = (4 if has_biases else 2) + (1 if projected else 0)
    hiddens = list(zip(_unbind(b, hx[0]), _unbind(b, hx[1])))
    out, finals = _layers(
        b, x, hiddens, _groups(params, size), num_layers, bidirectional, batch_first,
        lambda x, h, p, rev: _one_layer_lstm(b, x, h, p, has_biases, rev))
    return out, _stack(b, [h for h, _ in finals]), _stack(b, [c for _, c in finals])
