"""Training workloads judged by ``kernelwright bench --train`` (bench/training.py).

One file per workload (files starting with "_" hold shared layers). A workload file
defines:

* ``SIZES = {"small": {...}, "full": {...}}``: its configuration dicts; "small" trains
  in seconds on the software Vulkan driver (CI), "full" is the real model for a GPU;
* ``build(cfg) -> nn.Module``: the model, its weights drawn from torch's seeded RNG;
* ``loss(output, target) -> Tensor``: the loss of the model's output against the
  batch's last element (the model takes the batch's other elements);
* ``batch(cfg, index) -> tuple``: batch number `index`, a deterministic function of it
  (generated data, or windows of the shipped corpus);
* ``LR``: AdamW's learning rate (optional, default 1e-3).

Models train in fp32 with no dropout, so that a compiled run and PyTorch's eager run
from the same weights and batches can be compared step by step.
"""
