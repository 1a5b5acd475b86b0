"""The sandbox (optimize/sandbox.py): candidates judged in a worker process.

The kernel here is relu over 1000 floats, written by hand; every candidate is compared
with it element by element on fresh inputs. Each cheat gets its own status and a
message that says what was wrong; a hang costs that candidate only.
"""

from __future__ import annotations

import pytest

from kernelwright.optimize.generator import Binding
from kernelwright.optimize.sandbox import Sandbox, binding_problem
from kernelwright.optimize.search import kernel_job

N = 1000
HEAD = """\
@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = i32(gid.x);
"""
RELU = HEAD + "    if (i < 1000) { out[i] = max(in0[i], 0.0); }\n}\n"
BINDINGS = [Binding(0, "in0", (N,), "f32", "read"), Binding(1, "out", (N,), "f32", "read_write")]
GRID = (16, 1, 1)


def body(line: str) -> str:
    return HEAD + f"    {line}\n}}\n"


CANDIDATES = {
    # name: (source, status, words the message must hold)
    "compile_error": (body("if (i < 1000) { out[i] = max(in0[i], 0.0) }"), "compile_error",
                      ["expected"]),
    "wrong": (body("if (i < 1000) { out[i] = max(in0[i], 0.0) + select(0.0, 1e-2, i == 7); }"),
              "mismatch", ["elements differ", "[7]", "relative L2 error", "max |err|"]),
    "partial": (body("if (i < 500) { out[i] = max(in0[i], 0.0); }"), "rejected",
                ["unwritten", "500 of 1000"]),
    "constant": (body("if (i < 1000) { out[i] = 0.5; }"), "rejected", ["constant"]),
    "copy": (body("if (i < 1000) { out[i] = in0[i]; }"), "rejected", ["copy of input"]),
    "writes_input": (RELU.replace("var<storage, read> in0", "var<storage, read_write> in0"),
                     "rejected", ["binding 0", "read_write"]),
    "other_binding": (RELU.replace("@binding(1)", "@binding(2)"), "rejected",
                      ["binding(2)"]),
    "faster_or_not": (RELU.replace("@workgroup_size(64)", "@workgroup_size(128)"),
                      "correct", ["matches"]),
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(tmp_path_factory.mktemp("sandbox") / "log", timeout_s=60) as box:
        yield box


def job(source: str, grid=GRID, trials: int = 3) -> dict:
    return {"reference": kernel_job(RELU, GRID, BINDINGS, True), "best": None,
            "candidate": kernel_job(source, grid, BINDINGS, False), "trials": trials, "seed": 1,
            "reps": 3, "warmup": 1}


@pytest.mark.parametrize("name", list(CANDIDATES))
def test_each_candidate_gets_its_status_and_why(sandbox, name):
    source, status, words = CANDIDATES[name]
    grid = (8, 1, 1) if name == "faster_or_not" else GRID
    result = sandbox.evaluate(job(source, grid))
    assert result["status"] == status, result
    for word in words:
        assert word in result["message"], (word, result["message"])
    if status == "correct":
        assert result["time_ms"] > 0 and result["best_ms"] > 0


def test_a_half_written_grid_is_caught_by_the_poison(sandbox):
    result = sandbox.evaluate(job(RELU, grid=(8, 1, 1)))  # 512 of 1000 invocations
    assert result["status"] == "rejected" and "unwritten" in result["message"]


@pytest.mark.slow
def test_a_hang_costs_that_candidate_only(sandbox):
    # Searches the input for a bit pattern random inputs never hold (FLT_MAX), in each
    # of 65535 x 64 invocations. The software driver ends a loop after 65535 iterations
    # (llvmpipe's loop limiter): over 16 workgroups a "hang" took 0.1 s; over 65535 it
    # takes minutes.
    spin = body("var j = 0u; loop { if (bitcast<u32>(in0[(j + u32(i)) % 1000u]) == "
                "0x7f7fffffu) { break; } j = j + 1u; } "
                "if (i < 1000) { out[i] = max(in0[i], 0.0) + select(0.0, 1.0, j == 7u); }")
    result = sandbox.evaluate(job(spin, grid=(65535, 1, 1)), timeout_s=8)
    assert result["status"] == "timeout", result
    after = sandbox.evaluate(job(RELU))  # a fresh worker
    assert after["status"] == "correct", after


def test_binding_layouts_are_checked_before_compiling():
    assert binding_problem(RELU, [b.__dict__ for b in BINDINGS]) is None
    missing = RELU.replace("@group(0) @binding(0) var<storage, read> in0: array<f32>;\n", "")
    assert "binding 0 is not declared" in binding_problem(missing, [b.__dict__ for b in BINDINGS])
    uniform = RELU + "@group(0) @binding(1) var<uniform> u: vec4<f32>;\n"
    assert "var<uniform>" in binding_problem(uniform, [b.__dict__ for b in BINDINGS])
