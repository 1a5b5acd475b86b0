"""A Whisper-tiny-style encoder-decoder: a convolution stem over log-mel frames (two
1-d convolutions, the second strided, GELU), fixed sinusoidal positions, pre-norm
encoder self-attention blocks; a decoder with learned positions, causal
self-attention, cross-attention to the encoder and a head tied to its token embedding,
trained on next-token prediction. The data: mel frames from random tones, transcripts
of the tones' ids. Full: Whisper-tiny's shape (80 mels, 3000 frames, width 384, 4 + 4
layers, 6 heads, 51865 tokens)."""

import torch
import torch.nn.functional as F
from torch import nn

from kernelwright.suite.training._layers import EncoderBlock, sinusoids

SIZES = {
    "small": {"batch": 2, "mels": 8, "frames": 16, "dim": 16, "heads": 2, "layers": 1,
              "tokens": 6, "vocab": 24},
    "full": {"batch": 8, "mels": 80, "frames": 3000, "dim": 384, "heads": 6, "layers": 4,
             "tokens": 64, "vocab": 51865},
}
LR = 2e-3


class Whisper(nn.Module):
    """(mel [batch, mels, frames], tokens [batch, T]) -> logits [batch, T, vocab]."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        d = cfg["dim"]
        self.conv1 = nn.Conv1d(cfg["mels"], d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.register_buffer("positions", sinusoids(cfg["frames"] // 2, d), persistent=False)
        self.encoder = nn.ModuleList(EncoderBlock(d, cfg["heads"]) for _ in range(cfg["layers"]))
        self.enc_norm = nn.LayerNorm(d)
        self.emb = nn.Embedding(cfg["vocab"], d)
        self.pos = nn.Parameter(torch.randn(cfg["tokens"], d) * 0.01)
        self.decoder = nn.ModuleList(EncoderBlock(d, cfg["heads"], cross=True)
                                     for _ in range(cfg["layers"]))
        self.dec_norm = nn.LayerNorm(d)

    def forward(self, mel: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2) + self.positions
        for block in self.encoder:
            x = block(x)
        audio = self.enc_norm(x)
        h = self.emb(tokens) + self.pos
        for block in self.decoder:
            h = block(h, context=audio, causal=True)
        return F.linear(self.dec_norm(h), self.emb.weight)


def build(cfg: dict) -> nn.Module:
    return Whisper(cfg)


def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mel frames, decoder input tokens, target tokens): each clip is a sequence of
    tones, each tone lighting one mel band over a stretch of frames; its transcript
    names the tones' bands (ids from 2; 1 starts the transcript)."""
    g = torch.Generator().manual_seed(1000 + index)
    n, mels, frames, t = cfg["batch"], cfg["mels"], cfg["frames"], cfg["tokens"]
    bands = torch.randint(0, min(mels, cfg["vocab"] - 2), (n, t), generator=g)
    mel = 0.1 * torch.randn(n, mels, frames, generator=g)
    span = frames // t
    for i in range(n):
        for j in range(t):
            mel[i, bands[i, j], j * span:(j + 1) * span] += 1.0
    text = torch.cat([torch.ones(n, 1, dtype=torch.long), bands + 2], dim=1)
    return mel, text[:, :-1].contiguous(), text[:, 1:].contiguous()
