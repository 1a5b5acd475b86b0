"""EfficientNet-B0 layout: MBConv (expand, depthwise 3x3/5x5, squeeze-excite), SiLU, BN."""

import torch
from torch import nn

batch_size = 64
unit = 8
image_size = 224
num_classes = 1000

SIZES = {
    "small": {"batch_size": 2, "unit": 1, "image_size": 19, "num_classes": 7},
    "full": {"batch_size": 64, "unit": 8, "image_size": 224, "num_classes": 1000},
}

# (expansion, kernel, first stride, output channels in units of `unit`, repeats): B0's seven
# stages; unit 8 gives its widths 16, 24, 40, 80, 112, 192, 320 (stem 32, head 1280).
STAGES = [(1, 3, 1, 2, 1), (6, 3, 2, 3, 2), (6, 5, 2, 5, 2), (6, 3, 2, 10, 3), (6, 5, 1, 14, 3),
          (6, 5, 2, 24, 4), (6, 3, 1, 40, 1)]


def _randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def _conv_bn(in_channels, out_channels, kernel_size=1, stride=1, groups=1, act=True):
    layers = [
        nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                  padding=kernel_size // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out_channels, eps=1e-3),
    ]
    if act:
        layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeezed):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        s = x.mean(dim=(2, 3), keepdim=True)
        s = torch.sigmoid(self.expand(nn.functional.silu(self.reduce(s))))
        return x * s


class MBConv(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, expansion):
        super().__init__()
        hidden = in_channels * expansion
        layers = []
        if expansion != 1:
            layers.append(_conv_bn(in_channels, hidden))
        layers.append(_conv_bn(hidden, hidden, kernel_size, stride=stride, groups=hidden))
        layers.append(SqueezeExcitation(hidden, max(1, in_channels // 4)))
        layers.append(_conv_bn(hidden, out_channels, act=False))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x):
        out = self.block(x)
        return x + out if self.residual else out


class Model(nn.Module):
    def __init__(self, unit, num_classes):
        super().__init__()
        channels = 4 * unit
        layers = [_conv_bn(3, channels, 3, stride=2)]
        for expansion, kernel, stride, units, repeats in STAGES:
            for i in range(repeats):
                layers.append(MBConv(channels, units * unit, kernel, stride if i == 0 else 1,
                                     expansion))
                channels = units * unit
        layers.append(_conv_bn(channels, 160 * unit))
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(160 * unit, num_classes)
        _randomize_batchnorm(self)

    def forward(self, x):
        x = self.features(x).mean(dim=(2, 3))
        return self.classifier(self.dropout(x))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [unit, num_classes]
