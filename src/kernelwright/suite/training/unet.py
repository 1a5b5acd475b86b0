"""A diffusion U-Net predicting the noise added to an image (DDPM's objective): a
sinusoidal time embedding through an MLP, residual blocks (group norm, SiLU,
convolution, the time embedding added per channel), strided-convolution downsampling,
nearest upsampling, skip connections concatenated on the way up, self-attention at the
lowest resolution. Images are smooth random fields, noised on a cosine schedule."""

import math

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "small": {"batch": 2, "size": 8, "channels": 3, "width": 8, "levels": 2, "heads": 2},
    "full": {"batch": 32, "size": 64, "channels": 3, "width": 128, "levels": 4, "heads": 4},
}
LR = 1e-3
TIMESTEPS = 1000


def time_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features [batch, dim] of the (float) timesteps t [batch]."""
    freq = torch.exp(-math.log(10000.0) * torch.arange(dim // 2, device=t.device) / (dim // 2))
    angle = t[:, None] * freq[None, :]
    return torch.cat([angle.sin(), angle.cos()], dim=1)


class ResBlock(nn.Module):
    """Two group-normed SiLU convolutions, the time embedding added between them."""

    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(min(4, cin), cin), nn.GroupNorm(4, cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.time = nn.Linear(tdim, cout)
        self.short = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(temb)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.short(x)


class SpatialAttention(nn.Module):
    """Self-attention over the positions of a feature map, with a residual."""

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(4, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1, bias=False)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).view(n, 3, self.heads, c // self.heads, h * w) \
            .permute(1, 0, 2, 4, 3)
        a = F.scaled_dot_product_attention(q, k, v)  # [n, heads, hw, c / heads]
        return x + self.out(a.permute(0, 1, 3, 2).reshape(n, c, h, w))


class UNet(nn.Module):
    """(noisy images [batch, C, H, W], timesteps [batch]) -> predicted noise."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        w, levels = cfg["width"], cfg["levels"]
        self.tdim = 4 * w
        self.time = nn.Sequential(nn.Linear(w, self.tdim), nn.SiLU(),
                                  nn.Linear(self.tdim, self.tdim))
        self.stem = nn.Conv2d(cfg["channels"], w, 3, padding=1)
        widths = [w * min(2 ** i, 4) for i in range(levels)]
        self.down, self.pool = nn.ModuleList(), nn.ModuleList()
        cin = w
        for i, cw in enumerate(widths):
            self.down.append(ResBlock(cin, cw, self.tdim))
            self.pool.append(nn.Conv2d(cw, cw, 3, stride=2, padding=1)
                             if i + 1 < levels else nn.Identity())
            cin = cw
        self.mid = ResBlock(cin, cin, self.tdim)
        self.attn = SpatialAttention(cin, cfg["heads"])
        self.mid2 = ResBlock(cin, cin, self.tdim)
        self.up = nn.ModuleList()
        for cw in reversed(widths):
            self.up.append(ResBlock(cin + cw, cw, self.tdim))  # the skip concatenated
            cin = cw
        self.norm = nn.GroupNorm(4, cin)
        self.head = nn.Conv2d(cin, cfg["channels"], 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time(time_features(t, self.stem.out_channels))
        h = self.stem(x)
        skips = []
        for block, pool in zip(self.down, self.pool):
            h = block(h, temb)
            skips.append(h)
            h = pool(h)
        h = self.mid2(self.attn(self.mid(h, temb)), temb)
        for block in self.up:
            skip = skips.pop()
            if h.shape[-1] != skip.shape[-1]:
                h = F.interpolate(h, scale_factor=2.0, mode="nearest")
            h = block(torch.cat([h, skip], dim=1), temb)
        return self.head(F.silu(self.norm(h)))


def build(cfg: dict) -> nn.Module:
    return UNet(cfg)


def loss(predicted: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(predicted, noise)


def batch(cfg: dict, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(noisy images, timesteps as floats, the noise): clean images are random fields
    smoothed by average pooling, noised at a random step of a cosine schedule."""
    g = torch.Generator().manual_seed(1000 + index)
    n, s = cfg["batch"], cfg["size"]
    clean = F.avg_pool2d(torch.randn(n, cfg["channels"], s + 3, s + 3, generator=g), 4, 1)
    clean = clean / clean.std()
    t = torch.randint(0, TIMESTEPS, (n,), generator=g)
    alpha_bar = torch.cos((t.float() / TIMESTEPS + 0.008) / 1.008 * math.pi / 2) ** 2
    noise = torch.randn(clean.shape, generator=g)
    a = alpha_bar[:, None, None, None]
    return a.sqrt() * clean + (1 - a).sqrt() * noise, t.float(), noise
