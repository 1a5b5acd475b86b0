"""kernelwright: compile unmodified PyTorch modules into WGSL kernels run on wgpu.

Public entry points:

    compiled = kernelwright.compile(module, example_inputs)
    outputs = compiled(*inputs)          # torch tensors in, torch tensors out

    torch.compile(module, backend="kernelwright")
"""
