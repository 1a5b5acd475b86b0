"""Train a small SmolLM2-style causal language model with kernelwright.compile_training.

The model (RMSNorm, rotary position embeddings, grouped-query attention, a SwiGLU
feed-forward, embeddings tied to the output head) is trained on characters of a small
generated corpus (examples/data/tiny_corpus.txt) on the default GPU, or on the software
Vulkan driver where there is none. It prints a progress line (loss, tokens/s), saves a
checkpoint of the training state (TrainingStep.save), then generates a few characters
greedily through the inference path (kernelwright.compile of the trained model).

    python examples/train_lm.py                          # tiny: under 2 minutes on lavapipe
    python examples/train_lm.py --dim 256 --layers 6 --heads 8 --kv-heads 2 \\
        --seq 128 --batch 32 --steps 2000 --lr 1e-3      # a real config, for a GPU
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import kernelwright

CORPUS = Path(__file__).parent / "data" / "tiny_corpus.txt"


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps), scaled per channel."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           turn: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x (batch, heads, seq, head_dim): x * cos + (x with its
    halves swapped, the first negated) * sin; the swap is a product with the fixed matrix
    `turn`."""
    return x * cos + (x @ turn) * sin


def half_turn(head_dim: int) -> torch.Tensor:
    """The matrix R with x @ R == cat(-x[half:], x[:half])."""
    half = head_dim // 2
    r = torch.zeros(head_dim, head_dim)
    r[torch.arange(half) + half, torch.arange(half)] = -1.0
    r[torch.arange(half), torch.arange(half) + half] = 1.0
    return r


class Block(nn.Module):
    """Pre-norm attention (grouped-query, rotary, causal) and SwiGLU feed-forward."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                turn: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(n, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(n, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin, turn), rotate(k, cos, sin, turn)
        group = self.heads // self.kv_heads  # each key/value head serves `group` query heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(n, t, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class SmolLM(nn.Module):
    """A decoder-only LM: tokens (batch, seq) -> logits (batch, seq, vocab)."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, kv_heads: int,
                 seq: int, rope_base: float = 10000.0) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads, 4 * dim * 2 // 3)
                                    for _ in range(layers))
        self.norm = RMSNorm(dim)
        head_dim = dim // heads
        freq = rope_base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
        angle = torch.arange(seq).float()[:, None] * freq[None, :]
        angle = torch.cat([angle, angle], dim=-1)
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)
        self.register_buffer("turn", half_turn(head_dim), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        cos, sin = (self.cos, self.sin) if t == len(self.cos) else (self.cos[:t], self.sin[:t])
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x, cos, sin, self.turn)
        return F.linear(self.norm(x), self.emb.weight)  # the head tied to the embedding


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def batches(data: torch.Tensor, batch: int, seq: int, seed: int):
    """Random (input, next-character target) windows of the corpus, forever."""
    g = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        window = torch.stack([data[s:s + seq + 1] for s in start.tolist()])
        yield window[:, :-1].contiguous(), window[:, 1:].contiguous()


def generate(model: nn.Module, prompt: list[int], count: int, seq: int) -> list[int]:
    """`count` tokens after `prompt`, greedily, through one compiled forward of `seq`
    tokens: the context is the last `seq` tokens, right-padded while shorter (the
    attention is causal, so the padding never reaches the position read)."""
    compiled = kernelwright.compile(model.eval(), (torch.zeros(1, seq, dtype=torch.long),))
    out = list(prompt)
    for _ in range(count):
        context = out[-seq:]
        tokens = torch.tensor([context + [0] * (seq - len(context))])
        out.append(int(compiled(tokens)[0, len(context) - 1].argmax()))
    return out[len(prompt):]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=CORPUS)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--accumulate", type=int, default=1, help="micro-batches per update")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--checkpoint", type=Path, default=Path("train_lm.safetensors"))
    p.add_argument("--generate", type=int, default=40, help="characters to generate")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    text = args.corpus.read_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text])
    torch.manual_seed(args.seed)
    model = SmolLM(len(chars), args.dim, args.layers, args.heads, args.kv_heads, args.seq)
    model.train()
    stream = batches(data, args.batch, args.seq, args.seed)
    t0 = time.perf_counter()
    step = kernelwright.compile_training(
        model, next(stream), lm_loss,
        optimizer=kernelwright.optim.AdamW(lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1),
        max_grad_norm=1.0, accumulate=args.accumulate,
        lr_schedule=lambda i: args.lr * min(1.0, (i + 1) / 20))
    print(f"{len(text)} characters, vocabulary {len(chars)}, "
          f"{sum(q.numel() for q in model.parameters())} parameters; "
          f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    t0, tokens, losses = time.perf_counter(), 0, []
    for i in range(args.steps * args.accumulate):
        losses.append(step(*next(stream)))
        tokens += args.batch * args.seq
        done = i + 1 == args.steps * args.accumulate
        if (i + 1) % (args.log_every * args.accumulate) == 0 or done:
            rate = tokens / (time.perf_counter() - t0)
            recent = losses[-args.log_every * args.accumulate:]
            print(f"step {step.steps:5d}  loss {sum(recent) / len(recent):.4f}  "
                  f"{rate:,.0f} tokens/s", flush=True)
    step.save(args.checkpoint)
    print(f"checkpoint: {args.checkpoint}")
    step.sync_to(model)
    prompt = "The "
    out = generate(model, [index[c] for c in prompt], args.generate, args.seq)
    print(repr(prompt + "".join(chars[t] for t in out)))


if __name__ == "__main__":
    main()
