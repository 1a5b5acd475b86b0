"""Losses.

After torch.export's decompositions most losses are plain elementwise ops and
reductions (MSE, L1, Huber / smooth L1, KL divergence, BCE, hinge embedding, margin
ranking) or norms (triplet margin, cosine similarity: linalg_vector_norm, in norms.py).
What is left is picking each sample's class: cross-entropy and NLL decompose to
`aten.gather` on the log-probabilities, and some decomposition tables keep
`aten.nll_loss_forward` whole. Both lower to the `gather` movement primitive
(lower/movement.py), whose index tensor is read inside the index arithmetic of the
consuming kernel.
"""

from __future__ import annotations

from ..ir.ir import CompileError
from .elementwise import as_dtype, binary
from .registry import register


def _nll(b, x, target, weight, reduction, ignore_index):
    """-weight[t] * x[..., t, ...] per sample, the class dim being 1 (0 for 1-d x)."""
    if x.dtype != "f32":
        raise CompileError(f"nll_loss of a {x.dtype} input")
    cdim = 1 if len(x.shape) >= 2 else 0
    keep = binary(b, "ne", target, ignore_index)
    t = b.ew("where", keep, as_dtype(b, target, "i32"), b.scalar(0, "i32"))
    picked_shape = target.shape[:cdim] + (1,) + target.shape[cdim:]
    picked = b.reshape(b.gather(x, cdim, b.reshape(t, picked_shape)), target.shape)
    w = b.ew("cast", keep, dtype="f32")
    if weight is not None:
        wt = b.reshape(b.gather(weight, 0, b.reshape(t, (max(1, t.numel),))), target.shape)
        w = binary(b, "mul", w, wt)
    losses = b.ew("neg", binary(b, "mul", picked, w))
    total = b.reduce(w, "sum", [])
    if reduction == 0:
        return losses, total
    s = b.reduce(losses, "sum", [])
    if reduction == 2:
        return s, total
    if reduction == 1:
        return binary(b, "div", s, total), total
    raise CompileError(f"nll_loss reduction {reduction}")


@register("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")
def nll_loss_forward(b, x, target, weight, reduction, ignore_index):
    return _nll(b, x, target, weight, reduction, ignore_index)
