"""kernelwright's bundled benchmark suite: problems in KernelBench's format.

Each problem is one file under level1/ (single operations), level2/ (an operation
followed by fused elementwise, norm, pool or reduction steps) or level3/ (small
whole models). A file defines ``Model``, ``get_inputs()``, ``get_init_inputs()``
and ``SIZES = {"small": {...}, "full": {...}}``; the loader applies one of those
dicts to the module's constants before calling ``get_init_inputs``/``get_inputs``.
"small" is for correctness tests on a software Vulkan driver, "full" (the module's
own constants) for timing on a real GPU. Problems whose full sizes are KernelBench's
real ones over one 2 GiB binding (named for the size, e.g. ``116_gelu_6gib_matrix``)
have a small size over the software driver's 128 MiB binding, so that their kernels
are split into chunks there too.
"""
