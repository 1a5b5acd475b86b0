"""Movement ops (views, permutes, slices, cat, pad) against PyTorch eager."""

import torch
import torch.nn.functional as F
from conftest import Fn, check


def test_reshape_permute_transpose():
    x = torch.randn(2, 3, 4, 5)
    check(Fn(lambda x: (x.reshape(6, 20), x.permute(3, 1, 0, 2).contiguous(), x.transpose(1, 3),
                        x.view(2, -1).t(), x.flatten(1), x.unsqueeze(2).squeeze(2) + 1)), x)


def test_expand_slice_select():
    x = torch.randn(3, 1, 7)
    check(Fn(lambda x: (x.expand(3, 4, 7) * 1, x[:, :, 1:6:2], x[1], x[..., -1], x[:, 0, 2:])), x)


def test_cat_stack_pad_split():
    a, b = torch.randn(2, 3, 5), torch.randn(2, 4, 5)
    check(Fn(lambda a, b: (torch.cat([a, b], 1), torch.cat([a, a * 2], -1), torch.stack([a, a], 0),
                           F.pad(a, (1, 2)), F.pad(a, (0, 0, 2, 1), value=-1.5),
                           torch.split(b, 3, 1)[1], b.chunk(2, 1)[0])), a, b)


def test_view_output_of_input_is_copied():
    x = torch.randn(4, 6)
    check(Fn(lambda x: (x, x.view(2, 12), x.t())), x)


def test_index_select_embedding_index_and_roll():
    x = torch.randn(5, 7)
    i = torch.tensor([4, 0, -1, 2])
    emb = torch.nn.Embedding(11, 6)
    tokens = torch.randint(0, 11, (3, 4))
    check(Fn(lambda x, i: (torch.index_select(x, 1, i.clamp(min=0)), x[:, i], x[i],
                           torch.roll(x, 2, 1), torch.roll(x, -1, 0))), x, i)
    check(emb, tokens)


def test_one_hot():
    t = torch.randint(0, 6, (4, 3))
    check(Fn(lambda t: F.one_hot(t, 6) * 2), t)
