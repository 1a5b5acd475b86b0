"""LeNet-5: two 5x5 Conv2d + ReLU + MaxPool stages on one-channel images, then three Linears."""

import torch
from torch import nn

batch_size = 16384
image_size = 32
num_classes = 10

SIZES = {
    "small": {"batch_size": 2, "image_size": 29},
    "full": {"batch_size": 16384, "image_size": 32},
}


class Model(nn.Module):
    def __init__(self, image_size, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        side = ((image_size - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = x.view(x.shape[0], -1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def get_inputs():
    return [torch.randn(batch_size, 1, image_size, image_size)]


def get_init_inputs():
    return [image_size, num_classes]
