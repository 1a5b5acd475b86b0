"""The two WebGPU implementations kernelwright runs on, behind one `runtime.Device`:

- "wgpu": wgpu-native through the `wgpu` package (wgpu-py), the default. Kernels that
  kernelwright's templates wrote are compiled as trusted shader modules (no runtime
  checks); its experimental "cooperative-matrix" feature is requested where offered.
- "dawn": Google's Dawn through the `wgpudawn` package (the same wgpu-py API; the
  optional extra `pip install kernelwright[dawn]`). Dawn has no trusted modules; its
  bounds checks ("robustness") are a device-wide toggle instead, so a Dawn device opened
  for trusted kernels has `disable_robustness` and runs untrusted kernels (a saved plan
  loaded without trust, a candidate's source) on a second, robust device of the same
  adapter (runtime.Device.checked). The instance enables `allow_unsafe_apis` (Dawn's
  experimental features: `chromium-experimental-subgroup-matrix`) and the adapter
  `vulkan_enable_f16_on_nvidia` (Dawn leaves shader-f16 off on NVIDIA's Vulkan driver
  without it).

Which one a device comes from is decided in one place, `runtime_name` (an argument,
else KERNELWRIGHT_RUNTIME, else "wgpu"), read by runtime.default_device and
runtime.open_device. Feature names differ between the two; `FEATURES` maps each
runtime's names to kernelwright's (Device.features), so the rest of kernelwright asks
for "subgroups", "cooperative-matrix" or "subgroup-matrix" whatever the runtime.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from types import ModuleType

RUNTIMES = ("wgpu", "dawn")
ENV = "KERNELWRIGHT_RUNTIME"
# kernelwright's feature name -> each runtime's (None: the runtime has no such feature)
FEATURES = {
    "timestamp-query": {"wgpu": "timestamp-query", "dawn": "timestamp-query"},
    "shader-f16": {"wgpu": "shader-f16", "dawn": "shader-f16"},
    "subgroups": {"wgpu": "subgroup", "dawn": "subgroups"},
    # wgpu-native's experimental tensor-core feature (WGSL `wgpu_cooperative_matrix`)
    "cooperative-matrix": {"wgpu": "cooperative-matrix", "dawn": None},
    # Dawn's (WGSL `chromium_experimental_subgroup_matrix`), the configs in Device
    "subgroup-matrix": {"wgpu": None, "dawn": "chromium-experimental-subgroup-matrix"},
}
# Features that only some adapters grant even when they list them: a device that
# refuses one is opened without it, and Device.coop_error says why.
EXPERIMENTAL = ("cooperative-matrix", "subgroup-matrix")
DAWN_INSTANCE_TOGGLES = ("allow_unsafe_apis", "vulkan_enable_f16_on_nvidia")
DAWN_TRUSTED_TOGGLES = ("disable_robustness",)  # device toggles of a trusted-only device
# Dawn rounds timestamps to coarse steps by default (a browser's defence against timing
# attacks): an H100's kernel times came back in steps of 65.5 us. Ours are benchmarks.
DAWN_DISABLED_TOGGLES = ("timestamp_quantization",)


class RuntimeUnavailable(RuntimeError):
    """The chosen runtime cannot open a device here: its package is not installed, or
    no adapter of it runs compute shaders on this machine's drivers."""


@dataclass(frozen=True)
class SubgroupMatrixConfig:
    """One shape and type of subgroup matrix an adapter supports: M x K operands
    (`component`) times K x N into M x N results (`result`), for subgroups of
    min_subgroup..max_subgroup invocations."""

    component: str
    result: str
    m: int
    n: int
    k: int
    min_subgroup: int
    max_subgroup: int


def runtime_name(option: str | None = None) -> str:
    """The runtime of a device: `option`, else KERNELWRIGHT_RUNTIME, else "wgpu"."""
    name = (option or os.environ.get(ENV, "") or "wgpu").strip().lower()
    if name not in RUNTIMES:
        raise ValueError(f"runtime {name!r} is none of {RUNTIMES} ({ENV} or runtime=)")
    return name


_APIS: dict[str, ModuleType] = {}


def api(name: str) -> ModuleType:
    """The wgpu-py API module of runtime `name` (`wgpu` or `wgpudawn`); Dawn's instance
    is set up with DAWN_INSTANCE_TOGGLES the first time."""
    if name not in _APIS:
        if name == "wgpu":
            import wgpu

            _APIS[name] = wgpu
        else:
            try:
                import wgpudawn
                from wgpudawn.backends.dawn import extras
            except ImportError as exc:
                raise RuntimeUnavailable(
                    f"the Dawn runtime needs the wgpudawn package ({exc}); "
                    "pip install 'kernelwright[dawn]'") from exc
            known = extras.all_toggles()
            extras.set_instance_extras(
                backends=["Primary"],
                enable_toggles=[t for t in DAWN_INSTANCE_TOGGLES if t in known])
            _APIS[name] = wgpudawn
    return _APIS[name]


def pass_encoder(name: str):
    """`encode(compute_pass, steps)`: each step's pipeline, bind group 0 and dispatch
    (steps are (pipeline, bind group, (x, y, z)) of runtime `name`) recorded into the pass
    through the runtime's C functions (webgpu.h's, the same in wgpu-native and Dawn),
    without the Python wrapper of each call: a call's thousands of kernels are encoded
    in about a third of the time (wgpu-py: 3 wrapped calls, about 8 us a kernel on the
    CPU machine). An error in a call is the encoder's, raised by its `finish` as before."""
    if name == "wgpu":
        from wgpu.backends.wgpu_native._ffi import ffi, lib
    else:
        from wgpudawn.backends.dawn._ffi import ffi, lib
    set_pipeline = lib.wgpuComputePassEncoderSetPipeline
    set_group = lib.wgpuComputePassEncoderSetBindGroup
    dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
    null = ffi.NULL

    def encode(compute_pass, steps) -> None:
        handle = compute_pass._internal
        for pipe, group, (x, y, z) in steps:
            set_pipeline(handle, pipe._internal)
            set_group(handle, 0, group._internal, 0, null)
            dispatch(handle, x, y, z)

    return encode


def adapters(name: str) -> list:
    """The adapters of runtime `name` that run compute shaders (Vulkan, Metal or D3D12;
    never a GL backend); RuntimeUnavailable when Dawn finds none."""
    found = api(name).gpu.enumerate_adapters_sync()
    found = [a for a in found if a.info["backend_type"] in ("Vulkan", "Metal", "D3D12")]
    if not found and name == "dawn":
        raise RuntimeUnavailable(
            "Dawn found no Vulkan, Metal or D3D12 adapter (Mesa's software Vulkan driver "
            "before 26.1, Debian bookworm's 22.3 among them, lacks what Dawn requires)")
    return found


def adapter_features(name: str, adapter) -> dict[str, str]:
    """kernelwright's feature names the adapter lists -> the runtime's names."""
    listed = adapter.features
    return {ours: theirs[name] for ours, theirs in FEATURES.items()
            if theirs[name] is not None and theirs[name] in listed}


def request_device(name: str, adapter, features: list[str], limits: dict, robust: bool):
    """A GPUDevice of `adapter` with the runtime's `features` and `limits`; a Dawn one
    without robustness unless `robust` (wgpu-native's checks are per module instead)."""
    if name == "wgpu":
        return adapter.request_device_sync(required_features=features, required_limits=limits)
    from wgpudawn.backends.dawn import extras

    if adapter in _USED:  # a Dawn adapter makes one device: ask a fresh copy of it
        same = [a for a in adapters(name) if a.info == adapter.info]
        if not same:
            raise RuntimeUnavailable(f"Dawn no longer lists the adapter {adapter.info}")
        adapter = same[0]
    known = extras.all_toggles()
    device = extras.request_device_sync(
        adapter, required_features=features, required_limits=limits,
        enable_toggles=() if robust else DAWN_TRUSTED_TOGGLES,
        disable_toggles=[t for t in DAWN_DISABLED_TOGGLES if t in known])
    _USED.add(adapter)
    return device


_USED: weakref.WeakSet = weakref.WeakSet()  # Dawn adapters that made a device


def subgroup_matrix_configs(name: str, adapter) -> tuple[SubgroupMatrixConfig, ...]:
    """The subgroup-matrix configurations Dawn reports for `adapter` (none on wgpu)."""
    if name != "dawn" or FEATURES["subgroup-matrix"]["dawn"] not in adapter.features:
        return ()
    from wgpudawn.backends.dawn import extras

    configs = extras.get_adapter_properties(adapter).get("subgroup_matrix_configs", [])
    return tuple(SubgroupMatrixConfig(str(c["component_type"]), str(c["result_component_type"]),
                                      int(c["m"]), int(c["n"]), int(c["k"]),
                                      int(c["min_subgroup_size"]), int(c["max_subgroup_size"]))
                 for c in configs)
