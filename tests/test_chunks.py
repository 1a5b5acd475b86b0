"""Tensors larger than one binding (chunks.py): every template family on a device whose
binding limit is lowered to 64 KiB and whose largest buffer to 128 KiB, so that tensors
of a few hundred KiB take the chunked paths that 2-16 GiB tensors take on a GPU (2 GiB
per binding and 4 GiB per buffer on NVIDIA's Vulkan driver, 128 MiB per binding on the
software one), held in several device buffers each."""

import pytest
import torch
import torch.nn.functional as F

import kernelwright
from kernelwright.runtime.runtime import default_device, open_device

LIMIT = 1 << 16
_DEVICES = {}


def device_binding(limit):
    if limit not in _DEVICES:
        _DEVICES[limit] = open_device(default_device().adapter,
                                      {"max-storage-buffer-binding-size": limit,
                                       "max-buffer-size": 2 * limit})
    return _DEVICES[limit]


@pytest.fixture(scope="module")
def small_device():
    return device_binding(LIMIT)


class Fn(torch.nn.Module):
    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.params = torch.nn.ParameterList(params)

    def forward(self, *xs):
        return self.fn(*xs, *self.params)


def check(device, fn, inputs, params=(), atol=1e-4, rtol=1e-4):
    torch.manual_seed(0)
    module = Fn(fn, *[torch.nn.Parameter(p, requires_grad=False) for p in params]).eval()
    cm = kernelwright.compile(module, inputs, device=device)
    limit = device.binding_limits.max_bytes
    big = max(b.nbytes for b in cm.plan.buffers)
    chunked = [k for k in cm.plan.kernels if "[chunk" in k.name]
    assert big > limit and chunked, cm.plan.summary()
    assert any(b.segment for b in cm.plan.buffers) == (big > 2 * limit)
    for k in cm.plan.kernels:  # every binding within the limit (check_limits ran too)
        for i, b in enumerate(k.bindings):
            w = k.window(i)
            assert (cm.plan.buffers[b].nbytes if w is None else w[1]) <= limit
    with torch.no_grad():
        want = module(*inputs)
    got = cm(*inputs, poison=True)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for g, w in zip(gots, wants):
        torch.testing.assert_close(g, w.to(g.dtype), atol=atol, rtol=rtol)
    return cm


def r(*shape):
    return torch.randn(*shape)


def test_elementwise_with_broadcast(small_device):
    check(small_device, lambda x, b: torch.relu(x * 2 + b), [r(100, 1000), r(1000)])


def test_elementwise_reading_a_transposed_input_whole(small_device):
    # the transposed read is no range of its buffer: bound whole (it fits), x chunked
    check(small_device, lambda x, y: x + y.t(), [r(3, 200, 64), r(64, 200)])


@pytest.mark.parametrize("fn", [
    lambda x: torch.softmax(x, -1),
    lambda x: F.layer_norm(x, (x.shape[-1],)),
    lambda x: torch.log_softmax(x, 1),
    lambda x: x.sum(-1),
    lambda x: x.amax(1, keepdim=True) - x.mean(1, keepdim=True),
    lambda x: x.reshape(8, 12, 1200).sum(1),  # over a middle dim: chunks of whole batches
    lambda x: torch.cumsum(x, 1),
    lambda x: torch.cumsum(x.reshape(24, 4, 1200), 1),
    lambda x: x.argmax(1),
    lambda x: torch.sort(x.reshape(24, 4, 1200), 1, descending=True),
], ids=["softmax", "layernorm", "log_softmax", "sum_rows", "max_minus_mean", "sum_middle",
        "cumsum_rows", "cumsum_middle", "argmax", "sort_middle"])
def test_rows_reductions_and_scans(small_device, fn):
    check(small_device, fn, [r(96, 1200)], atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("shapes", [((300, 64), (64, 200)),      # C over the limit: rows
                                    ((6, 60, 64), (6, 64, 50)),   # batched
                                    ((2, 200, 64), (64, 96))])    # a shared weight
def test_matmul(small_device, shapes):
    check(small_device, torch.matmul, [r(*s) for s in shapes], atol=1e-3, rtol=1e-4)


def test_linear_and_gelu(small_device):
    check(small_device, lambda x, w, b: F.gelu(F.linear(x, w, b)), [r(400, 64)],
          [r(96, 64), r(96)], atol=1e-3)


def test_conv2d_batch(small_device):
    check(small_device, lambda x, w: torch.relu(F.conv2d(x, w, padding=1)),
          [r(6, 8, 24, 24)], [r(8, 8, 3, 3)], atol=1e-3)


def test_conv_transpose2d(small_device):
    check(small_device, lambda x, w: F.conv_transpose2d(x, w, stride=2),
          [r(4, 8, 16, 16)], [r(8, 4, 3, 3)], atol=1e-3)


def test_pools(small_device):
    check(small_device, lambda x: (F.max_pool2d(x, 2), F.avg_pool2d(x, 3, 1, 1)),
          [r(4, 16, 24, 24)])


def test_attention(small_device):
    check(small_device, F.scaled_dot_product_attention,
          [r(4, 4, 128, 32), r(4, 4, 128, 32), r(4, 4, 128, 32)], atol=1e-3)


def test_whole_tensor_reductions_and_losses():
    # a reduction of the whole tensor runs in two steps (ir.reduce_split): the first's
    # pieces of 4096 elements or more, its output's chunks aligned (8 rows of 4 bytes
    # at an alignment of 32): a larger limit, as on real devices (2 GiB against pieces
    # of a few MiB)
    check(device_binding(1 << 18), lambda x, y, t: (x.sum(), F.mse_loss(x, y),
                                                    F.cross_entropy(x, t)),
          [r(512, 1200), r(512, 1200), torch.randint(0, 1200, (512,))], atol=1e-3)


def test_unsplittable_kernel_is_a_clear_error(small_device):
    # a product whose right operand alone is larger than one binding
    module = Fn(torch.matmul)
    with pytest.raises(RuntimeError, match="split this kernel into chunks"):
        kernelwright.compile(module, [r(4, 200), r(200, 200)], device=small_device)


def test_reads_that_are_no_box_of_their_buffer(small_device):
    # a scan of all but the last column (cumsum exclusive): each chunk reads its rows of
    # x, bound whole and sliced; rows of 101 floats: windows start at unaligned bytes
    def exclusive(x):
        return torch.cat([torch.zeros_like(x[:, :1]), torch.cumsum(x[:, :-1], 1)], 1)

    check(small_device, exclusive, [r(300, 101)], atol=1e-3)


@pytest.mark.parametrize("shape", [(7, 3, 128, 128), (7, 5, 100, 100)])
def test_one_value_windowed_by_rows_and_by_pieces(shape):
    # x / ||x||: x's square is written by rows and summed in pieces of another length,
    # and it is held in several device buffers: their size serves both (plan_segments)
    cm = check(device_binding(1 << 18), lambda x: x / torch.norm(x, p="fro"), [r(*shape)])
    assert any(b.segment for b in cm.plan.buffers)


def _selective_scan(da, dbu, c, h):
    outs = []
    for i in range(da.shape[2]):  # one recur kernel (GraphBuilder.linear_recurrences)
        h = da[:, :, i] * h + dbu[:, :, i]
        outs.append(torch.matmul(h, c[:, i].unsqueeze(-1))[:, :, 0])
    return torch.stack(outs, dim=-1), h


def test_linear_recurrence(small_device):
    """A loop's recurrence over [2, 64, 16, 16] (128 KiB a stacked value): its kernel in
    chunks of whole columns."""
    cm = check(small_device, _selective_scan, [torch.rand(2, 64, 16, 16), r(2, 64, 16, 16),
                                               r(2, 16, 16), r(2, 64, 16)])
    assert any(k.name.startswith("recur") and "[chunk" in k.name for k in cm.plan.kernels), \
        cm.plan.summary()
