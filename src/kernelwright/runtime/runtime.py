"""Runtime: execute a Plan on a WebGPU device (Vulkan, Metal or Direct3D 12).

`default_device()` picks an adapter (discrete GPU, then integrated, then the
software one; `KERNELWRIGHT_ADAPTER=<substring>` overrides) of the runtime chosen by
its argument or KERNELWRIGHT_RUNTIME (wgpu-native or Dawn, runtimes.py) and opens it
with its full limits. `Executable` binds a Plan to a device once: it creates the buffers,
uploads the constants, builds the pipelines (cached per WGSL text for the device's
lifetime) and the bind groups. Each call then uploads the inputs, records every
kernel into one compute pass of one submission, and reads the outputs back once.
No Python work per element and no PyTorch op runs on this path.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..codegen.codegen import used_bindings
from ..dtypes import DEVICE_DTYPE_OF, numpy_type
from ..options import BindingLimits
from ..plan import Plan
from . import runtimes
from .runtimes import SubgroupMatrixConfig


def _runtime_dir() -> None:
    """Point XDG_RUNTIME_DIR, where unset, at a private folder of this user's (a fixed
    one under the temp dir, reused while it is ours and private; else a fresh one): the
    software Vulkan driver's window-system code prints an error for each adapter it
    enumerates without one. Runs before wgpu is first imported."""
    if not sys.platform.startswith("linux") or os.environ.get("XDG_RUNTIME_DIR"):
        return
    path = os.path.join(tempfile.gettempdir(), f"kernelwright-runtime-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700 \
                or not stat.S_ISDIR(st.st_mode):
            path = tempfile.mkdtemp(prefix="kernelwright-runtime-")
    except OSError:
        return
    os.environ["XDG_RUNTIME_DIR"] = path


_runtime_dir()

# wgpu's flags and enums (buffer usages, binding types) are those of both runtimes:
# wgpudawn mirrors wgpu-py's API, values included.
import wgpu  # noqa: E402 - after XDG_RUNTIME_DIR is set
from wgpu.backends.wgpu_native import _api  # noqa: E402 - as wgpu

ADAPTER_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3, "Unknown": 4}
# kernelwright's names (runtimes.FEATURES); "cooperative-matrix" (wgpu-native) and
# "subgroup-matrix" (Dawn) are what the accelerated precision mode needs: a device that
# refuses them is opened without them (runtimes.EXPERIMENTAL).
OPTIONAL_FEATURES = ("timestamp-query", "subgroups", "shader-f16", "cooperative-matrix",
                     "subgroup-matrix")
POISON_CHUNK = 64 << 20  # bytes of NaN written per call when poisoning buffers
TRANSFER_CHUNK = 256 << 20  # bytes per upload or read-back call (bounds the staging copies)
# A call's kernels are encoded and submitted in growing batches, the first SUBMIT_FIRST
# kernels, then twice as many each time up to SUBMIT_MOST: the GPU runs the first ones
# while the host encodes the rest (encoding costs the host about 8 us a kernel, which
# a step of thousands of small kernels otherwise adds to its GPU time).
SUBMIT_FIRST = 32
SUBMIT_MOST = 512
# Outputs are read back together (one copy, one map) while their bytes add up to at most
# this (and the device's largest buffer)
READ_TOGETHER = 1 << 20
# kernels timed per query set by kernel_times_ms: WebGPU allows 4096 queries in one set,
# two per kernel
KERNELS_PER_QUERY_SET = 2048
# wgpu's shader translator (naga) adds runtime checks to every shader: a clamp on each
# array index (workgroup tiles included) and a counter in each loop. A kernel that
# kernelwright's templates wrote (Kernel.trusted) indexes in bounds and terminates by
# construction, so it is compiled without them (wgpu-native's trusted shader modules);
# any other source (a language model's candidate) keeps them. FORCE_SHADER_CHECKS = True
# compiles every kernel with them (tools/kernels.py --shader-checks measures the cost).
# Dawn checks per device instead (runtimes.py): its trusted kernels run on a device
# without robustness, the others on its robust sibling (Device.checked).
FORCE_SHADER_CHECKS = False


@dataclass
class Device:
    adapter: wgpu.GPUAdapter
    device: wgpu.GPUDevice
    description: str
    is_software: bool
    has_timestamps: bool
    coop_error: str = ""  # why the adapter's experimental matrix feature was not granted
    runtime: str = "wgpu"  # "wgpu" (wgpu-native) or "dawn" (runtimes.py)
    features: frozenset[str] = frozenset()  # granted, by kernelwright's names (runtimes)
    subgroup_matrix_configs: tuple[SubgroupMatrixConfig, ...] = ()  # Dawn's, if granted
    robust: bool = True  # False: a Dawn device without bounds checks (trusted kernels only)
    lower: dict | None = None  # the limits open_device was asked to lower

    @property
    def max_bindings(self) -> int:
        """The storage buffers a kernel may bind (per shader stage; WebGPU's default 8)."""
        return self.limits.get("max-storage-buffers-per-shader-stage", 8)

    @property
    def binding_limits(self) -> BindingLimits:
        """What one kernel may bind here (schedule.build_plan plans within it)."""
        lim = self.limits
        return BindingLimits(self.max_bindings, max_binding_bytes(lim),
                             lim.get("min-storage-buffer-offset-alignment", 256),
                             lim.get("max-buffer-size", 1 << 28))

    @property
    def has_coop_matrix(self) -> bool:
        """The device was granted cooperative matrices (the accelerated mode's matmuls)."""
        return "cooperative-matrix" in self.features

    @property
    def limits(self) -> dict:
        """The device's limits (wgpu-py's names), those open_device was asked to lower
        lowered: Dawn grants at least WebGPU's defaults whatever is asked, so a stand-in
        for a smaller device keeps to them here, where kernelwright plans."""
        lim = dict(self.device.limits)
        lim.update({k: min(v, lim[k]) for k, v in (self.lower or {}).items() if k in lim})
        return lim

    def __post_init__(self) -> None:
        self._pipelines: dict[str, wgpu.GPUComputePipeline] = {}
        self.pipeline_seconds = 0.0  # total time spent creating pipelines
        self._checked: Device | None = None

    def checked(self) -> Device:
        """The device that runs kernels with bounds checks: this one, except for a Dawn
        device without robustness, whose robust sibling on the same adapter (the same
        limits) is opened on first use."""
        if self.robust:
            return self
        if self._checked is None:
            self._checked = open_device(self.adapter, self.lower, robust=True)
        return self._checked

    def pipelines(self, sources: list[tuple[str, bool]]) -> list[wgpu.GPUComputePipeline]:
        """Pipelines for many kernels ((WGSL, trusted) each), the missing ones created on
        several threads (the driver's shader compiler is the bulk of compile time; wgpu's
        calls release the GIL, so they overlap)."""
        sources = [(src, trusted and not FORCE_SHADER_CHECKS) for src, trusted in sources]
        missing = list(dict.fromkeys(s for s in sources if _key(*s) not in self._pipelines))
        if len(missing) > 1:
            with ThreadPoolExecutor(max_workers=min(8, len(missing))) as pool:
                list(pool.map(lambda s: self.pipeline(*s), missing))
        return [self.pipeline(*s) for s in sources]

    def pipeline(self, source: str, trusted: bool = False) -> wgpu.GPUComputePipeline:
        """The pipeline of a kernel; `trusted` (written by kernelwright's templates)
        compiles it without wgpu's runtime checks (FORCE_SHADER_CHECKS)."""
        trusted = trusted and not FORCE_SHADER_CHECKS
        if not trusted and not self.robust:
            raise RuntimeError(f"{self.description} runs without bounds checks (Dawn's "
                               "disable_robustness): an untrusted kernel runs on "
                               "Device.checked()")
        key = _key(source, trusted)
        pipe = self._pipelines.get(key)
        if pipe is None:
            t0 = time.perf_counter()
            module = (_trusted_module(self.device, source) if trusted and self.runtime == "wgpu"
                      else self.device.create_shader_module(code=source))
            pipe = self.device.create_compute_pipeline(
                layout=self._layout(source), compute={"module": module, "entry_point": "main"})
            self.pipeline_seconds += time.perf_counter() - t0
            self._pipelines[key] = pipe
        return pipe

    def _layout(self, source: str) -> wgpu.GPUPipelineLayout:
        """The pipeline layout of the storage bindings the kernel reaches (`used_bindings`,
        the same set `bind_group` binds)."""
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.storage if access == "read_write"
                               else wgpu.BufferBindingType.read_only_storage}}
                   for i, access in used_bindings(source).items()]
        group = self.device.create_bind_group_layout(entries=entries)
        return self.device.create_pipeline_layout(bind_group_layouts=[group])

    def bind_group(self, source: str, pipe: wgpu.GPUComputePipeline,
                   buffers: list[wgpu.GPUBuffer],
                   windows: list[tuple[int, int] | None] | None = None) -> wgpu.GPUBindGroup:
        """The bind group of a pipeline made by `pipeline(source)`: buffers[i] at binding
        i, for each binding the kernel reaches; windows[i] ([offset, size] in bytes)
        binds only that range of it."""
        def resource(i: int) -> dict:
            w = windows[i] if windows and i < len(windows) else None
            if w is None:
                return {"buffer": buffers[i]}
            return {"buffer": buffers[i], "offset": w[0], "size": w[1]}

        return self.device.create_bind_group(
            layout=pipe.get_bind_group_layout(0),
            entries=[{"binding": i, "resource": resource(i)} for i in used_bindings(source)])


def open_device(adapter: wgpu.GPUAdapter, lower: dict | None = None,
                robust: bool = False) -> Device:
    """A device of `adapter` (of the runtime whose package made it, runtimes.py) with
    its full limits, or lower ones where `lower` names them (e.g.
    {"max-storage-buffers-per-shader-stage": 8}: a stand-in for a smaller device).
    `robust`: a Dawn device with bounds checks for every kernel (else trusted kernels
    run without them, and untrusted ones on Device.checked())."""
    name = _runtime_of(adapter)
    info = adapter.info
    offered = runtimes.adapter_features(name, adapter)
    features = {f: offered[f] for f in OPTIONAL_FEATURES if f in offered}
    limits = {k: v for k, v in adapter.limits.items()
              if k.startswith("max-") and "storage" in k or "workgroup" in k
              or k == "max-buffer-size" or k == "max-bind-groups"}
    limits.update({k: min(v, adapter.limits[k]) for k, v in (lower or {}).items()})
    robust = robust or name == "wgpu"  # wgpu-native checks per module (pipeline)
    coop_error = ""
    try:
        device = runtimes.request_device(name, adapter, list(features.values()), limits, robust)
    except Exception as exc:  # noqa: BLE001 - an experimental feature listed but refused
        if not any(f in features for f in runtimes.EXPERIMENTAL):
            raise
        for f in runtimes.EXPERIMENTAL:
            features.pop(f, None)
        coop_error = f"{type(exc).__name__}: {exc}".strip()
        device = runtimes.request_device(name, adapter, list(features.values()), limits, robust)
    configs = (runtimes.subgroup_matrix_configs(name, adapter)
               if "subgroup-matrix" in features else ())
    desc = f"{info['device']} ({info['backend_type']}, {info['adapter_type']}" + \
        (", Dawn)" if name == "dawn" else ")")
    return Device(adapter, device, desc, info["adapter_type"] == "CPU",
                  "timestamp-query" in features, coop_error, name, frozenset(features),
                  configs, robust, dict(lower) if lower else None)


_DEFAULTS: dict[str, Device] = {}


def default_device(runtime: str | None = None) -> Device:
    """The device kernelwright runs on unless told otherwise (opened once per process
    and runtime): `runtime` (runtimes.runtime_name), else KERNELWRIGHT_RUNTIME, else
    wgpu-native. runtimes.RuntimeUnavailable where that runtime opens no device here."""
    name = runtimes.runtime_name(runtime)
    if name not in _DEFAULTS:
        adapters = runtimes.adapters(name)
        wanted = os.environ.get("KERNELWRIGHT_ADAPTER", "").lower()
        if wanted:
            adapters = [a for a in adapters if wanted in str(a.info).lower()]
        if not adapters:
            raise RuntimeError("no wgpu adapter found (Vulkan, Metal or D3D12); on Linux "
                               "install a GPU driver or Mesa's software driver "
                               "(mesa-vulkan-drivers)")
        adapters.sort(key=lambda a: ADAPTER_RANK.get(a.info["adapter_type"], 9))
        _DEFAULTS[name] = open_device(adapters[0])
    return _DEFAULTS[name]


def _runtime_of(adapter) -> str:
    """The runtime whose package made `adapter` ("dawn" for wgpudawn's)."""
    return "dawn" if type(adapter).__module__.startswith("wgpudawn") else "wgpu"


def max_binding_bytes(limits: dict) -> int:
    """The most bytes of a buffer one binding may cover."""
    return min(limits.get("max-storage-buffer-binding-size", 1 << 27),
               limits.get("max-buffer-size", 1 << 28))


def check_limits(plan: Plan, limits: dict, description: str) -> None:
    """Refuse, with a clear error, a plan that the device's limits (which open_device
    requested in full) cannot run: a buffer larger than the device allocates, a binding
    larger than a kernel can bind (a kernel the planner could not split into chunks,
    chunks.py), a kernel with more storage buffers than a shader stage may bind (a fused
    kernel reading many tensors), more workgroup memory than the device has, or a grid
    of more workgroups per dimension than the device dispatches (a tampered saved
    plan's: Plan.load). wgpu checks none of these before the pipeline is built, and then
    only with a validation message; knobs that need more workgroup memory than the
    device has fail here, and the tuner discards them."""
    largest = limits.get("max-buffer-size", 1 << 28)
    for b in plan.buffers:
        if (b.segment or _aligned(b.nbytes)) > largest:
            raise RuntimeError(
                f"buffer b{b.id} ({b.kind}, {_size(b.nbytes)}) is larger than "
                f"{description} can allocate ({_size(largest)}); "
                "compile for smaller inputs")
    most = max_binding_bytes(limits)
    buffers = limits.get("max-storage-buffers-per-shader-stage", 8)  # Device.max_bindings
    memory = limits.get("max-compute-workgroup-storage-size", 16384)
    align = limits.get("min-storage-buffer-offset-alignment", 256)
    per_dim = limits.get("max-compute-workgroups-per-dimension", 65535)
    for k in plan.kernels:
        if max(k.grid) > per_dim:
            raise RuntimeError(f"kernel {k.name} dispatches {k.grid} workgroups; {description} "
                               f"allows {per_dim} per dimension")
        for i, b in enumerate(k.bindings):
            w = k.window(i)
            size = _aligned(plan.buffers[b].nbytes) if w is None else w[1]
            if size > most:
                raise RuntimeError(
                    f"kernel {k.name} binds {_size(size)} of buffer b{b} "
                    f"({plan.buffers[b].kind}); {description} can bind "
                    f"{_size(most)} to a kernel, and the planner found no way to "
                    "split this kernel into chunks that fit (chunks.py): compile for smaller "
                    "inputs")
            if w is not None and w[0] % align:
                raise RuntimeError(f"kernel {k.name} binds buffer b{b} at offset {w[0]}, "
                                   f"not a multiple of {align}")
            seg = plan.buffers[b].segment
            if seg and (w is None or w[0] // seg != (w[0] + w[1] - 1) // seg):
                raise RuntimeError(f"kernel {k.name} binds buffer b{b} across two of its "
                                   f"device buffers of {_size(seg)}")
        bound = len(used_bindings(k.source))
        if bound > buffers:
            raise RuntimeError(f"kernel {k.name} binds {bound} storage buffers; {description} "
                               f"allows {buffers} per kernel")
        if k.workgroup_bytes > memory:
            raise RuntimeError(f"kernel {k.name} ({k.knobs}) needs {k.workgroup_bytes} bytes "
                               f"of workgroup memory; {description} has {memory}")


class Executable:
    """A Plan bound to a device: buffers allocated, constants uploaded, pipelines built."""

    def __init__(self, plan: Plan, device: Device | None = None,
                 share_state: Executable | None = None,
                 share_constants: bool = True) -> None:
        """`share_state`: another Executable on the same device whose state (Plan.state)
        this one reads and updates too, buffer for buffer by name (a prompt's plan and a
        decode step's sharing one KV cache); a name whose buffers differ in size or dtype
        is a ValueError. With
        `share_constants` its constant buffers are this one's too wherever the host data
        are the same bytes (`_same_constants`: a model's weights, uploaded once for all
        its plans); the caller vouches that the other's constants are still what it
        uploaded (compile checks its weights' versions)."""
        self.plan = plan
        self.dev = device or default_device()
        if not all(k.trusted for k in plan.kernels) or FORCE_SHADER_CHECKS:
            self.dev = self.dev.checked()  # a Dawn device checks per device, not per kernel
        d = self.dev.device
        usage = (wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
                 | wgpu.BufferUsage.COPY_SRC)
        check_limits(plan, self.dev.limits, self.dev.description)
        shared = {}
        if share_state is not None:
            if share_state.dev is not self.dev:
                raise ValueError("share_state: the other plan runs on another device (a Dawn "
                                 "plan with untrusted kernels runs on Device.checked())")
            theirs = {name: spec.buffer for name, spec in share_state.plan.state}
            for name, spec in plan.state:
                if name not in theirs:
                    continue
                mine, other = plan.buffers[spec.buffer], share_state.plan.buffers[theirs[name]]
                if (mine.nbytes, mine.dtype) != (other.nbytes, other.dtype):
                    # not one buffer: each plan would read and update its own copy
                    raise ValueError(
                        f"share_state: state {name!r} is {mine.nbytes} bytes of {mine.dtype} "
                        f"here but {other.nbytes} bytes of {other.dtype} in the other plan "
                        "(a half tensor one plan holds in f32, or another shape)")
                shared[spec.buffer] = share_state.segments[theirs[name]]
            if share_constants:
                for mine, their in _same_constants(plan, share_state.plan).items():
                    shared.setdefault(mine, share_state.segments[their])
        # a buffer larger than the device allocates is several (Buffer.segment)
        self.segments = [shared.get(b.id) or
                         ([d.create_buffer(size=min(b.segment, _aligned(b.nbytes) - o),
                                           usage=usage)
                           for o in range(0, _aligned(b.nbytes), b.segment)] if b.segment
                          else [d.create_buffer(size=_aligned(b.nbytes), usage=usage)])
                         for b in plan.buffers]
        self.buffers = [s[0] for s in self.segments]  # the device buffer of each unsplit one
        self._staging = None  # read_all's staging buffer, kept from call to call
        for bid, data in plan.constants.items():
            if bid not in shared:
                self.write(bid, np.ascontiguousarray(data))
        self.steps = []
        self.encode = runtimes.pass_encoder(self.dev.runtime)
        pipes = self.dev.pipelines([(k.source, k.trusted) for k in plan.kernels])
        for k, pipe in zip(plan.kernels, pipes):
            parts = [self._piece(b, k.window(i)) for i, b in enumerate(k.bindings)]
            group = self.dev.bind_group(k.source, pipe, [p[0] for p in parts],
                                        [p[1] for p in parts])
            self.steps.append((pipe, group, tuple(int(g) for g in k.grid)))

    def device_buffers(self) -> dict[int, int]:
        """The device buffers this plan allocated or shares: id -> bytes."""
        return {id(buf): buf.size for seg in self.segments for buf in seg}

    def _piece(self, bid: int, window: tuple[int, int] | None):
        """The device buffer and window a binding of buffer `bid` takes (a window of a
        buffer held in several is a window of one of them)."""
        seg = self.plan.buffers[bid].segment
        if not seg or window is None:
            return self.segments[bid][0], window
        i, offset = divmod(window[0], seg)
        return self.segments[bid][i], (offset, min(window[1], seg - offset))

    def _spans(self, bid: int, size: int):
        """(device buffer, its offset, the byte offset in the whole) of buffer `bid`'s
        first `size` bytes, in pieces of at most TRANSFER_CHUNK within one device buffer."""
        seg = self.plan.buffers[bid].segment or _aligned(self.plan.buffers[bid].nbytes)
        offset = 0
        while offset < size:
            i, local = divmod(offset, seg)
            n = min(TRANSFER_CHUNK, size - offset, seg - local)
            yield self.segments[bid][i], local, offset, n
            offset += n

    def write(self, bid: int, array: np.ndarray) -> None:
        """Buffer `bid`'s bytes from `array` (in pieces, across its device buffers), padded
        to whole words (an odd count of two-byte elements: the queue writes words)."""
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if raw.size % 4:
            raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
        for buf, local, offset, n in self._spans(bid, raw.size):
            self.dev.device.queue.write_buffer(buf, local, raw[offset:offset + n])

    def upload(self, arrays: list[np.ndarray]) -> None:
        for spec, a in zip(self.plan.inputs, arrays):
            self.write(spec.buffer, np.ascontiguousarray(a))

    def poison(self) -> None:
        """Fill every intermediate and output buffer with NaN (in chunks of one shared
        NaN block, so that poisoning costs no host memory per buffer)."""
        chunk = min(POISON_CHUNK, max((_aligned(b.nbytes) for b in self.plan.buffers), default=0))
        nan = np.full(chunk // 4, np.nan, np.float32)
        for b in self.plan.buffers:
            if b.kind not in ("temp", "output"):
                continue
            for seg in self.segments[b.id]:
                for offset in range(0, seg.size, chunk):
                    n = min(chunk, seg.size - offset)
                    self.dev.device.queue.write_buffer(seg, offset, nan[: n // 4])

    def _record(self, encoder, timestamps=None, per_kernel=False) -> None:
        self._record_kernels(encoder, timestamps, per_kernel)
        self._record_updates(encoder)

    def _record_updates(self, encoder) -> None:
        """The state the call changed, copied for the next call (Plan.updates)."""
        for src, dst in self.plan.updates:
            for a, b in zip(self.segments[src], self.segments[dst]):
                encoder.copy_buffer_to_buffer(a, 0, b, 0, min(a.size, b.size))

    def _record_kernels(self, encoder, timestamps=None, per_kernel=False) -> None:
        """The kernels in one compute pass, `timestamps` its timestamp writes; with
        `per_kernel`, one pass per kernel, `timestamps` a list of (query set, kernels) of
        consecutive kernels, two queries (begin, end) per kernel."""
        if per_kernel:
            sets = [(qs, j) for qs, count in timestamps for j in range(count)]
            for (pipe, group, grid), (qs, j) in zip(self.steps, sets, strict=True):
                tw = {"query_set": qs, "beginning_of_pass_write_index": 2 * j,
                      "end_of_pass_write_index": 2 * j + 1}
                p = encoder.begin_compute_pass(timestamp_writes=tw)
                self.encode(p, [(pipe, group, grid)])
                p.end()
            return
        p = encoder.begin_compute_pass(timestamp_writes=timestamps)
        self.encode(p, self.steps)
        p.end()

    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """One call: its outputs, read back with its checks' values; a check that is
        false raises its message (a RuntimeError, as eager's failed check raises)."""
        self.dispatch(arrays)
        n = len(self.plan.outputs)
        got = self.read_all([*self.plan.outputs, *(t for t, _ in self.plan.checks)])
        for (_, message), ok in zip(self.plan.checks, got[n:]):
            if not ok.reshape(-1)[0]:
                raise RuntimeError(f"the module's check failed: {message}")
        return got[:n]

    def dispatch(self, arrays: list[np.ndarray]) -> None:
        """One call whose outputs stay on the GPU (`read` them, or check them there:
        tune.gpucheck): its kernels submitted in batches (SUBMIT_FIRST), each its own
        compute pass, so the GPU starts on the first while the rest are encoded."""
        self.upload(arrays)
        d = self.dev.device
        start, size, n = 0, SUBMIT_FIRST, len(self.steps)
        while True:
            enc = d.create_command_encoder()
            if start < n:
                p = enc.begin_compute_pass()
                self.encode(p, self.steps[start:start + size])
                p.end()
            start, size = start + size, min(2 * size, SUBMIT_MOST)
            if start >= n:
                self._record_updates(enc)
                d.queue.submit([enc.finish()])
                return
            d.queue.submit([enc.finish()])

    def read_all(self, specs) -> list[np.ndarray]:
        """Outputs back on the host, small ones (a loss, a norm, a token's logits)
        through one staging buffer of at most READ_TOGETHER bytes, kept for the next
        call: one copy and one wait for them all, not one a tensor and no buffer made
        each call; the others one at a time (`read`)."""
        cap = min(READ_TOGETHER, self.dev.limits.get("max-buffer-size", READ_TOGETHER))
        small, offsets, total = [], [], 0
        for i, spec in enumerate(specs):
            if spec.buffer is None:  # empty: `read` makes it
                continue
            size = _aligned(self._nbytes(spec))
            if not self.plan.buffers[spec.buffer].segment and total + size <= cap:
                small.append(i)
                offsets.append(total)
                total += size
        out: list[np.ndarray | None] = [None] * len(specs)
        if small and total:
            d = self.dev.device
            if self._staging is None or self._staging.size < total:
                if self._staging is not None:
                    self._staging.destroy()
                self._staging = d.create_buffer(
                    size=total, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            staging = self._staging
            enc = d.create_command_encoder()
            for i, at in zip(small, offsets):
                enc.copy_buffer_to_buffer(self.buffers[specs[i].buffer], 0, staging, at,
                                          _aligned(self._nbytes(specs[i])))
            d.queue.submit([enc.finish()])
            staging.map_sync(wgpu.MapMode.READ, 0, total)
            raw = np.frombuffer(staging.read_mapped(0, total), np.uint8)  # a copy
            staging.unmap()
            for i, at in zip(small, offsets):
                spec = specs[i]
                dtype = numpy_type(self.plan.buffers[spec.buffer].dtype)
                n = int(np.prod(spec.shape))
                out[i] = raw[at:at + n * np.dtype(dtype).itemsize].view(dtype).reshape(spec.shape)
        return [self.read(spec) if got is None else got for spec, got in zip(specs, out)]

    def _nbytes(self, spec) -> int:
        """The bytes of a TensorSpec's elements as its buffer stores them."""
        dtype = numpy_type(self.plan.buffers[spec.buffer].dtype)
        return int(np.prod(spec.shape)) * np.dtype(dtype).itemsize

    def read(self, spec) -> np.ndarray:
        """An output (a TensorSpec's buffer and shape) back on the host."""
        if spec.buffer is None:  # an empty output (a dimension of size 0), held nowhere
            return np.empty(spec.shape, numpy_type(DEVICE_DTYPE_OF[spec.torch_dtype]))
        b = self.plan.buffers[spec.buffer]
        dtype = numpy_type(b.dtype)
        n = int(np.prod(spec.shape))
        size = _aligned(n * np.dtype(dtype).itemsize)
        if size <= TRANSFER_CHUNK and not b.segment:
            raw = self.dev.device.queue.read_buffer(self.buffers[spec.buffer], 0, size)
            return np.frombuffer(raw, dtype=dtype, count=n).reshape(spec.shape)
        out = np.empty(size, np.uint8)
        for buf, local, offset, part in self._spans(spec.buffer, size):
            out[offset:offset + part] = np.frombuffer(
                self.dev.device.queue.read_buffer(buf, local, part), np.uint8)
        return out.view(dtype)[:n].reshape(spec.shape)

    def gpu_times_ms(self, input_sets: list[list[np.ndarray]], reps: int) -> list[float]:
        """GPU time of `reps` calls, rotating through input_sets, from timestamps."""
        if not self.dev.has_timestamps:
            raise RuntimeError(f"{self.dev.description} has no timestamp queries")
        d = self.dev.device
        qs = d.create_query_set(type=wgpu.QueryType.timestamp, count=2 * reps)
        for r in range(reps):
            if r == 0 or len(input_sets) > 1:  # one set: uploaded once, for every call
                self.upload(input_sets[r % len(input_sets)])
            enc = d.create_command_encoder()
            self._record(enc, {"query_set": qs, "beginning_of_pass_write_index": 2 * r,
                               "end_of_pass_write_index": 2 * r + 1})
            d.queue.submit([enc.finish()])
        ticks = self._resolve(qs, 2 * reps)
        return [(ticks[2 * r + 1] - ticks[2 * r]) / 1e6 for r in range(reps)]

    def kernel_times_ms(self, arrays: list[np.ndarray],
                        per_set: int = KERNELS_PER_QUERY_SET) -> list[float]:
        """GPU time of each kernel in one call (one compute pass per kernel; `per_set`
        kernels per query set, as many sets as the plan needs)."""
        d = self.dev.device
        n = len(self.steps)
        counts = [min(per_set, n - start) for start in range(0, n, per_set)]
        sets = [(d.create_query_set(type=wgpu.QueryType.timestamp, count=2 * c), c)
                for c in counts]
        self.upload(arrays)
        enc = d.create_command_encoder()
        self._record(enc, sets, per_kernel=True)
        d.queue.submit([enc.finish()])
        ticks = np.concatenate([self._resolve(qs, 2 * c) for qs, c in sets]) if sets \
            else np.zeros(0, np.int64)
        return [(ticks[2 * i + 1] - ticks[2 * i]) / 1e6 for i in range(n)]

    def _resolve(self, qs, count: int) -> np.ndarray:
        d = self.dev.device
        buf = d.create_buffer(size=8 * count,
                              usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        enc = d.create_command_encoder()
        enc.resolve_query_set(qs, 0, count, buf, 0)
        d.queue.submit([enc.finish()])
        return np.frombuffer(d.queue.read_buffer(buf), dtype=np.uint64).astype(np.int64)


def device_bytes(executables: list[Executable]) -> int:
    """The bytes of device memory a set of Executables holds (buffers they share counted
    once): what their plans allocate, not the driver's overhead."""
    held: dict[int, int] = {}
    for exe in executables:
        held.update(exe.device_buffers())
    return sum(held.values())


SAMPLES = 64  # elements of a constant compared before its bytes are


def _same_constants(plan: Plan, other: Plan) -> dict[int, int]:
    """Constant buffers of `plan` whose host data are byte for byte those of a constant
    of `other` (dtype, size and device segmentation agreeing): buffer id -> other's id.
    State (a constant a call updates) is never matched: its device value moves on.
    Arrays over the same memory in the same layout (a model's weight, or a view of it
    such as its transpose, read by both plans) match without reading them; the others
    are narrowed by a sample of their elements before the bytes are compared, so that
    many weights of one shape (a model's layers) cost one comparison each."""
    def moving(p: Plan) -> set[int]:
        return {spec.buffer for _, spec in p.state} | {dst for _, dst in p.updates}

    def layout(p: Plan, bid: int, data: np.ndarray) -> tuple:
        return (data.__array_interface__["data"][0], data.shape, data.strides,
                data.dtype.str, p.buffers[bid].segment)

    def key(p: Plan, bid: int, data: np.ndarray) -> tuple:
        at = np.linspace(0, data.size - 1, min(SAMPLES, data.size)).astype(np.int64)
        picks = np.ascontiguousarray(data[np.unravel_index(at, data.shape)])
        return data.dtype.str, data.nbytes, p.buffers[bid].segment, picks.tobytes()

    def raw(data: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)

    theirs_moving = moving(other)
    index: dict[tuple, list[int]] = {}
    placed: dict[tuple, int] = {}
    for bid, data in other.constants.items():
        if bid not in theirs_moving and data.size:
            placed.setdefault(layout(other, bid, data), bid)
            index.setdefault(key(other, bid, data), []).append(bid)
    mine_moving = moving(plan)
    out = {}
    for bid, data in plan.constants.items():
        if bid in mine_moving or not data.size:
            continue
        same = placed.get(layout(plan, bid, data))
        if same is not None:
            out[bid] = same
            continue
        for their in index.get(key(plan, bid, data), ()):
            if np.array_equal(raw(data), raw(other.constants[their])):
                out[bid] = their
                break
    return out


def _key(source: str, trusted: bool = False) -> str:
    return hashlib.sha1(source.encode()).hexdigest() + ("-trusted" if trusted else "")


def _trusted_module(device: wgpu.GPUDevice, source: str) -> wgpu.GPUShaderModule:
    """A WGSL module compiled without naga's runtime checks (bounds clamps, loop
    counters): wgpu-native's wgpuDeviceCreateShaderModuleTrusted, which wgpu-py does not
    wrap, called through its cffi binding the way its create_shader_module calls
    wgpuDeviceCreateShaderModule."""
    ffi, lib = _api.ffi, _api.lib
    wgsl = _api.new_struct_p("WGPUShaderSourceWGSL *", code=_api.to_c_string_view(source))
    wgsl[0].chain.next = ffi.NULL
    wgsl[0].chain.sType = lib.WGPUSType_ShaderSourceWGSL
    desc = _api.new_struct_p("WGPUShaderModuleDescriptor *",
                             nextInChain=ffi.cast("WGPUChainedStruct *", wgsl),
                             label=_api.to_c_string_view(""))
    # libf raises wgpu's errors (a WGSL compile error) as exceptions, as for any module
    handle = _api.libf.wgpuDeviceCreateShaderModuleTrusted(device._internal, desc,
                                                           lib.WGPUShaderRuntimeChecks_None)
    if handle == ffi.NULL:
        raise RuntimeError("shader module creation failed")
    return _api.GPUShaderModule("", handle, device)


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 1 << 24 else f"{n / 2**10:.1f} KiB"


def _aligned(n: int) -> int:
    return (n + 15) // 16 * 16
