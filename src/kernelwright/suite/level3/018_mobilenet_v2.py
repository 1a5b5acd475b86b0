"""MobileNetV2: inverted residual blocks (1x1 expand, depthwise 3x3, linear 1x1), ReLU6, BN, fc."""

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

# (expansion t, output channels in units of `unit`, repeats n, first stride s); unit 8
# gives the width-1.0 network: 16, 24, 32, 64, 96, 160, 320 channels.
STAGES = [(1, 2, 1, 1), (6, 3, 2, 2), (6, 4, 3, 2), (6, 8, 4, 2), (6, 12, 3, 1), (6, 20, 3, 2),
          (6, 40, 1, 1)]


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
        nn.BatchNorm2d(out_channels),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, in_channels, out_channels, stride, expansion):
        super().__init__()
        hidden = in_channels * expansion
        layers = []
        if expansion != 1:
            layers.append(_conv_bn(in_channels, hidden))
        layers.append(_conv_bn(hidden, hidden, 3, stride=stride, groups=hidden))
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
        for expansion, units, repeats, stride in STAGES:
            for i in range(repeats):
                layers.append(InvertedResidual(channels, units * unit, stride if i == 0 else 1,
                                               expansion))
                channels = units * unit
        layers.append(_conv_bn(channels, 160 * unit))
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(160 * unit, num_classes)
        _randomize_batchnorm(self)

    def forward(self, x):
        x = self.features(x)
        x = x.mean(dim=(2, 3))
        return self.classifier(self.dropout(x))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [unit, num_classes]
