"""The options of one compile, decided once and passed explicitly to whoever reads them.

`compile()`, `plan_module`, `compile_training` and `generate` make one `CompileOptions`
and hand it down: to the lowering (GraphBuilder.options: a large product's cut reads the
device's waves), to the scheduler (build_plan: the binding limits) and to the kernel
generators (kernels.generate: the precision picks the matmul template, the waves its
tiles, the chooser each kernel's knobs). No global or context variable carries them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PRECISIONS = ("strict", "accelerated")


@dataclass(frozen=True)
class BindingLimits:
    """What one kernel may bind on a device: storage buffers per kernel, bytes per
    binding, and the alignment of a binding's offset (runtime.Device.binding_limits)."""

    max_bindings: int
    max_bytes: int
    align: int
    max_buffer: int = 1 << 62  # bytes of the largest buffer the device allocates


@dataclass(frozen=True)
class Waves:
    """How many workgroups of each large-product tile setting a device runs at once."""

    wide: int  # kernels.matmul.MATMUL_LARGE_TILES
    plain: int  # kernels.matmul.MATMUL_PLAIN_TILES

    def __post_init__(self) -> None:
        if not (isinstance(self.wide, int) and isinstance(self.plain, int)
                and self.wide >= 1 and self.plain >= 1):
            raise ValueError(f"slots must be positive integers, got {self}")


MATRIX_APIS = ("subgroup-matrix", "cooperative-matrix")


@dataclass(frozen=True)
class MatrixUnit:
    """The matrix units an accelerated matmul is written for: `api` (the WGSL spelling:
    "subgroup-matrix", Dawn's chromium_experimental_subgroup_matrix; "cooperative-matrix",
    wgpu-native's wgpu_cooperative_matrix), one product's m x n x k (f16 operands, f32
    results) and the invocations per subgroup (kernels.matmul_coop.matrix_unit picks it
    from what a device reports)."""

    api: str
    m: int
    n: int
    k: int
    subgroup: int

    def __post_init__(self) -> None:
        if self.api not in MATRIX_APIS:
            raise ValueError(f"matrix api {self.api!r} is none of {MATRIX_APIS}")
        if not all(isinstance(v, int) and v >= 1
                   for v in (self.m, self.n, self.k, self.subgroup)):
            raise ValueError(f"matrix sides and subgroup must be positive integers, got {self}")


@dataclass(frozen=True)
class CompileOptions:
    """What one compile generates for. `precision`: "strict" (fp32 everywhere) or
    "accelerated" (f32 matmuls with f16 operands and f32 accumulation on the matrix
    units `matrix`, kernels.matmul_coop; required in that mode: which device can run
    them is compiler.resolve_precision's decision). `waves`: the device's slots for the large
    products' tiles (tune.waves.device_waves; None: unknown, the fixed rules of
    kernels.matmul_tiles). `limits`: what one kernel may bind (Device.binding_limits;
    None: no limit). `choose`: a kernels.KnobChooser asked for each kernel's knobs
    (None: the templates' heuristic defaults; compile() passes tune.choose_knobs)."""

    precision: str = "strict"
    waves: Waves | None = None
    limits: BindingLimits | None = None
    choose: Callable | None = None
    matrix: MatrixUnit | None = None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is none of {PRECISIONS}")
        if self.precision == "accelerated" and self.matrix is None:
            raise ValueError("the accelerated precision needs the device's matrix unit "
                             "(CompileOptions.matrix: kernels.matrix_unit)")
