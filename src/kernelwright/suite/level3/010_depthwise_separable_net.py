"""MobileNet-style net: conv stem, four depthwise-separable blocks with BN + ReLU, mean, Linear."""

import torch
from torch import nn

batch_size = 64
width = 32
image_size = 224
num_classes = 1000

SIZES = {
    "small": {"batch_size": 2, "width": 5, "image_size": 23, "num_classes": 7},
    "full": {"batch_size": 64, "width": 32, "image_size": 224, "num_classes": 1000},
}


def _randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def _conv_bn_relu(in_channels, out_channels, kernel_size, stride, groups):
    return nn.Sequential(
        nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=kernel_size,
            stride=stride,
            padding=kernel_size // 2,
            groups=groups,
            bias=False,
        ),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
    )


class Model(nn.Module):
    def __init__(self, width, num_classes):
        super().__init__()
        layers = [_conv_bn_relu(3, width, 3, stride=2, groups=1)]
        channels = width
        plan = [(2 * width, 1), (4 * width, 2), (4 * width, 1), (8 * width, 2)]
        for out_channels, stride in plan:
            layers.append(_conv_bn_relu(channels, channels, 3, stride=stride, groups=channels))
            layers.append(_conv_bn_relu(channels, out_channels, 1, stride=1, groups=1))
            channels = out_channels
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(channels, num_classes)
        _randomize_batchnorm(self)

    def forward(self, x):
        x = self.features(x)
        return self.fc(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [width, num_classes]
