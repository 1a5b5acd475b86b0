"""Small UNet: conv-BN-ReLU levels with max pool down, ConvTranspose2d up, skip concat."""

import torch
from torch import nn

batch_size = 4
in_channels = 3
base = 64
image_size = 256
num_classes = 2

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "base": 2, "image_size": 24, "num_classes": 2},
    "full": {"batch_size": 4, "in_channels": 3, "base": 64, "image_size": 256, "num_classes": 2},
}


def _randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def _double_conv(in_channels, out_channels):
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
        nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class Up(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=2, stride=2)
        self.conv = _double_conv(2 * out_channels, out_channels)

    def forward(self, x, skip):
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class Model(nn.Module):
    def __init__(self, in_channels, base, num_classes):
        super().__init__()
        self.enc1 = _double_conv(in_channels, base)
        self.enc2 = _double_conv(base, 2 * base)
        self.enc3 = _double_conv(2 * base, 4 * base)
        self.bottleneck = _double_conv(4 * base, 8 * base)
        self.pool = nn.MaxPool2d(2)
        self.up3 = Up(8 * base, 4 * base)
        self.up2 = Up(4 * base, 2 * base)
        self.up1 = Up(2 * base, base)
        self.head = nn.Conv2d(base, num_classes, kernel_size=1)
        _randomize_batchnorm(self)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        e3 = self.enc3(self.pool(e2))
        b = self.bottleneck(self.pool(e3))
        d3 = self.up3(b, e3)
        d2 = self.up2(d3, e2)
        d1 = self.up1(d2, e1)
        return self.head(d1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, base, num_classes]
