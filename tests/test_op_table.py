"""codegen.OPS, the one table of elementwise ops: every op the lowerings build has an
entry with its cost class; every ATen op an entry names lowers to it and matches eager."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from conftest import check

from kernelwright.codegen.codegen import COMPUTE, HELPERS, OPS, TRANSCENDENTAL, Op
from kernelwright.ir.ir import GraphBuilder
from kernelwright.lower.registry import lookup
from kernelwright.schedule.schedule import TRANSCENDENTAL_FNS

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kernelwright"
TABLE_ATEN = sorted((aten, fn) for fn, op in OPS.items() for aten in op.aten)


def built_fns() -> set[str]:
    """The op names that the package's code passes to GraphBuilder.ew (directly or through
    elementwise.unary_float and binary) as string literals."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if "suite" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            at = {"ew": 0, "unary_float": 1, "binary": 1}.get(name)
            if at is None or len(node.args) <= at:
                continue
            arg = node.args[at]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
            elif isinstance(arg, ast.IfExp):  # "gelu_tanh" if ... else "gelu"
                found.update(a.value for a in (arg.body, arg.orelse)
                             if isinstance(a, ast.Constant))
    return found


def test_every_op_the_lowerings_build_has_an_entry() -> None:
    fns = built_fns()
    assert {"add", "exp", "where", "gelu", "relu"} <= fns  # the scan finds them
    missing = fns - set(OPS) - {"cast"}  # cast: a conversion, by the emitter's own rule
    assert not missing, f"elementwise ops without an entry in codegen.OPS: {sorted(missing)}"


@pytest.mark.parametrize("fn", sorted(OPS))
def test_every_entry_is_complete(fn: str) -> None:
    op = OPS[fn]
    assert isinstance(op, Op) and callable(op.wgsl)
    assert op.cost in ("cheap", TRANSCENDENTAL)
    assert op.compute in COMPUTE
    assert set(op.helpers) <= set(HELPERS)
    assert (fn in TRANSCENDENTAL_FNS) == (op.cost == TRANSCENDENTAL)  # what fusion reads


def test_cost_classes_fusion_depends_on() -> None:
    assert {"exp", "log", "tanh", "sigmoid", "erf", "gelu"} <= TRANSCENDENTAL_FNS
    assert not {"sqrt", "rsqrt", "div", "add", "relu"} & TRANSCENDENTAL_FNS


@pytest.mark.parametrize("aten,fn", TABLE_ATEN)
def test_an_entrys_aten_op_lowers_to_it(aten: str, fn: str) -> None:
    lowering = lookup(f"aten.{aten}.default")
    assert lowering is not None, aten
    b = GraphBuilder()
    out = lowering(b, b.input((4,), "f32", "x"))
    assert out.node.op == "ew" and out.node.attrs["fn"] == fn


class _Aten(torch.nn.Module):
    def __init__(self, aten: str) -> None:
        super().__init__()
        self.op = getattr(torch.ops.aten, aten).default

    def forward(self, x):
        return self.op(x)


@pytest.mark.parametrize("aten", sorted({aten for aten, _ in TABLE_ATEN}))
def test_an_entrys_aten_op_matches_eager(aten: str) -> None:
    x = torch.rand(2, 33) * 1.8 + 0.1  # in every entry's domain (logs, roots)
    check(_Aten(aten), x)
