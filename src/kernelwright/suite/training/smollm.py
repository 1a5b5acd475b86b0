"""A SmolLM2-style causal language model (RMSNorm, rotary embeddings, grouped-query
attention, SwiGLU, embeddings tied to the head) trained on next-character prediction
over windows of the shipped corpus examples/data/tiny_corpus.txt. Full: SmolLM2-135M's
shape (its 49152-entry vocabulary; the corpus's characters use the first few ids)."""

from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from kernelwright.suite.training._layers import LlamaBlock, RMSNorm, rope_tables

CORPUS = Path(__file__).resolve().parents[4] / "examples" / "data" / "tiny_corpus.txt"

SIZES = {
    "small": {"batch": 2, "seq": 8, "dim": 32, "layers": 2, "heads": 4, "kv_heads": 2,
              "hidden": 64, "vocab": 40},
    "full": {"batch": 8, "seq": 512, "dim": 576, "layers": 30, "heads": 9, "kv_heads": 3,
             "hidden": 1536, "vocab": 49152},
}
LR = 3e-3


class SmolLM(nn.Module):
    """tokens [batch, seq] -> logits [batch, seq, vocab]."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.emb = nn.Embedding(cfg["vocab"], cfg["dim"])
        nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = nn.ModuleList(
            LlamaBlock(cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["hidden"])
            for _ in range(cfg["layers"]))
        self.norm = RMSNorm(cfg["dim"])
        cos, sin = rope_tables(cfg["seq"], cfg["dim"] // cfg["heads"], 100000.0)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x, (self.cos, self.sin))
        return F.linear(self.norm(x), self.emb.weight)  # the head tied to the embedding


def build(cfg: dict) -> nn.Module:
    return SmolLM(cfg)


def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@lru_cache(maxsize=1)
def corpus() -> torch.Tensor:
    """The corpus as character ids (its sorted characters numbered from 0)."""
    if not CORPUS.is_file():
        raise FileNotFoundError(f"the smollm workload trains on {CORPUS}, which is missing "
                                "(it ships with a source checkout of kernelwright)")
    text = CORPUS.read_text()
    index = {c: i for i, c in enumerate(sorted(set(text)))}
    return torch.tensor([index[c] for c in text])


def batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    data = corpus()
    if int(data.max()) >= cfg["vocab"]:
        raise ValueError(f"the corpus has {int(data.max()) + 1} characters, more than the "
                         f"vocabulary of {cfg['vocab']}")
    g = torch.Generator().manual_seed(1000 + index)
    start = torch.randint(0, len(data) - cfg["seq"] - 1, (cfg["batch"],), generator=g)
    window = torch.stack([data[s:s + cfg["seq"] + 1] for s in start.tolist()])
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()
