"""One-hot operands: a product with (tokens == arange).float() is a gather of the other
operand's rows (or columns), tokens outside the arange giving zeros (lower/linalg.one_hot)."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check
from torch import nn

K = 13


def _names(compiled):
    return [k.name for k in compiled.plan.kernels]


def _tokens(*shape):
    """Tokens in [-4, K + 4): some negative, some past the table, most inside."""
    return torch.randint(-4, K + 4, shape)


class Embedding(nn.Module):
    """The suite's form: eq against a registered arange buffer, cast to the table's dtype."""

    def __init__(self, vocab: torch.Tensor, n: int = 6):
        super().__init__()
        self.table = nn.Parameter(torch.randn(len(vocab), n))
        self.register_buffer("vocab", vocab)

    def forward(self, tokens):
        one_hot = (tokens.unsqueeze(-1) == self.vocab).to(self.table.dtype)
        return torch.matmul(one_hot, self.table)


@pytest.mark.slow
def test_one_hot_products_are_gathers():
    """Operand 0 or 1 one-hot, against an arange buffer (any start) or an inline arange
    (an iota), scaled by a where, batched: no matmul kernel, and rows of tokens outside
    the arange are zero."""
    ar = torch.arange(K)
    forms = [
        (Embedding(torch.arange(K)), (_tokens(3, 7),)),
        (Embedding(torch.arange(5, 5 + K)), (_tokens(2, 9) + 5,)),
        (Fn(lambda t, w: (t.unsqueeze(-1) == torch.arange(K)).float() @ w),
         (_tokens(11), torch.randn(K, 5))),
        (Fn(lambda t, w: torch.where(t.unsqueeze(-1) == torch.arange(K), 2.5, 0.0) @ w),
         (_tokens(2, 8), torch.randn(K, 5))),
        (Fn(lambda t, w: torch.bmm((t[..., None] == ar).float(), w)),  # a table per batch
         (_tokens(3, 8), torch.randn(3, K, 4))),
        (Fn(lambda t, w: w @ (t == torch.arange(K).unsqueeze(-1)).float()),  # operand 1
         (_tokens(9), torch.randn(5, K))),
        (Fn(lambda t, w: w @ (t == torch.arange(K).unsqueeze(-1)).float()),  # transposed
         (_tokens(2, 1, 9), torch.randn(5, K))),  # by ATen: [2, 9, K] @ w.T, then back
        (Fn(lambda t, w: F.one_hot(t, K).float() @ w),  # F.one_hot refuses bad tokens
         (torch.randint(0, K, (4, 6)), torch.randn(K, 3))),
    ]
    for module, inputs in forms:
        compiled = check(module, *inputs)
        assert not any("matmul" in n for n in _names(compiled)), compiled.plan.summary()
        assert any("gather" in n for n in _names(compiled)), compiled.plan.summary()
    for start in (0, 5, -(2**31), 2**31 - K):  # a zero row for each outsider
        tokens = torch.tensor([[start - 1, start, start + K - 1, start + K, 2**31 - 1,
                                -(2**31)]]).clamp(-(2**31), 2**31 - 1)
        compiled = check(Embedding(torch.arange(start, start + K)), tokens)
        out, inside = compiled(tokens)[0], (tokens[0] >= start) & (tokens[0] < start + K)
        assert torch.equal(out[~inside], torch.zeros(int((~inside).sum()), 6)), out
        assert int(inside.sum()) >= 2 and not any("matmul" in n for n in _names(compiled))


def test_operands_that_only_look_one_hot_stay_products():
    """An eq against a buffer that is no arange (reversed, step 2, shuffled), a <= mask,
    or tokens varying along K are products: a matmul, matching PyTorch."""
    t = _tokens(3, 5)
    for vocab in (torch.arange(K).flip(0), torch.arange(0, 2 * K, 2), torch.randperm(K)):
        if torch.equal(vocab, torch.arange(K)):
            continue
        compiled = check(Embedding(vocab), t)
        assert any("matmul" in n for n in _names(compiled)), compiled.plan.summary()
    w = torch.randn(K, 4)
    compiled = check(Fn(lambda t, w: (t.unsqueeze(-1) <= torch.arange(K)).float() @ w), t, w)
    assert any("matmul" in n for n in _names(compiled)), compiled.plan.summary()
    t2 = _tokens(5, K)  # a token per (row, column): not constant along K
    compiled = check(Fn(lambda t, w: (t == torch.arange(K)).float() @ w), t2, w)
    assert any("matmul" in n for n in _names(compiled)), compiled.plan.summary()


@pytest.mark.slow
def test_lstm_language_model_embeds_by_gather():
    """level3/023 at its small size, with tokens outside the vocabulary too."""
    path = (Path(__file__).resolve().parents[1] / "src" / "kernelwright" / "suite" / "level3"
            / "023_lstm_language_model.py")
    spec = importlib.util.spec_from_file_location("kernelwright_suite_023", path)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    size = problem.SIZES["small"]
    torch.manual_seed(0)
    model = problem.Model(size["vocab_size"], size["embed_dim"], size["hidden"])
    tokens = torch.randint(-3, size["vocab_size"] + 3, (size["batch_size"], size["seq_len"]))
    compiled = check(model, tokens)
    assert not any(n.startswith("eq+cast+matmul") for n in _names(compiled))
    assert any("gather" in n and "matmul" in n for n in _names(compiled)), _names(compiled)
