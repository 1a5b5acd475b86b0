"""`kernelwright bench --train` with each workload in a worker process of its own: a
workload that raises, crashes its process or hangs costs only its own row (with the
stage it was in), the others are judged; --resume reuses the rows of unchanged files.
Tiny workloads on the software driver."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path

import pytest

from kernelwright.cli import main as cli

TINY = '''
import torch
import torch.nn.functional as F
from torch import nn

SIZES = {"small": {"batch": 4, "inputs": 6, "classes": 3}}


def build(cfg):
    return nn.Sequential(nn.Linear(cfg["inputs"], 8), nn.ReLU(), nn.Linear(8, cfg["classes"]))


def loss(logits, labels):
    return F.cross_entropy(logits, labels)


def batch(cfg, index):
    g = torch.Generator().manual_seed(index)
    x = torch.randn(cfg["batch"], cfg["inputs"], generator=g)
    return x, torch.randint(0, cfg["classes"], (cfg["batch"],), generator=g)
'''
RAISES = TINY.replace('def build(cfg):\n', 'def build(cfg):\n    raise RuntimeError("no model")\n')
CRASHES = TINY.replace('def build(cfg):\n', 'def build(cfg):\n    import os, signal\n'
                       '    os.kill(os.getpid(), signal.SIGSEGV)\n')
# hangs while compile_training draws the example batch: the compile stage
HANGS = TINY.replace('def batch(cfg, index):\n', 'def batch(cfg, index):\n    import time\n'
                     '    time.sleep(3600)\n')
TIMEOUT_S = 40  # the worker's imports and a tiny compile fit with room on 2 busy cores


def bench(suite: Path, out: Path, *extra: str) -> int:
    return cli.main(["bench", "--train", str(suite), "--out", str(out), "--size", "small",
                     "--steps", "2", "--timeout", str(TIMEOUT_S), *extra])


@pytest.fixture(scope="module")
def train_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("train")
    suite = root / "workloads"
    suite.mkdir()
    for name, text in {"a_ok": TINY, "b_raises": RAISES, "c_crashes": CRASHES,
                       "d_hangs": HANGS}.items():
        (suite / f"{name}.py").write_text(text)
    out = root / "out"
    code = bench(suite, out)
    doc = json.loads((out / "results.json").read_text())
    return {"suite": suite, "out": out, "code": code,
            "rows": {r["name"]: r for r in doc["workloads"]}}


def test_each_failure_is_its_own_row(train_run):
    rows = train_run["rows"]
    assert train_run["code"] == 1  # not every workload matched
    assert list(rows) == ["a_ok", "b_raises", "c_crashes", "d_hangs"]
    assert rows["a_ok"]["status"] == "PASS", rows["a_ok"].get("error")
    assert rows["a_ok"]["finished"] and rows["a_ok"]["stage"] == "done"
    raised = rows["b_raises"]
    assert raised["status"] == "ERROR" and raised["stage"] == "load"
    assert "RuntimeError: no model" in raised["error"] and "stage: load" in raised["error"]
    crashed = rows["c_crashes"]
    assert crashed["status"] == "CRASH" and crashed["reason"] == "crash"
    assert "SIGSEGV" in crashed["error"] and "stage: load" in crashed["error"]
    hung = rows["d_hangs"]
    assert hung["status"] == "TIMEOUT" and hung["reason"] == "timeout"
    assert hung["stage"] == "compile" and f"killed after {TIMEOUT_S} s" in hung["error"]
    assert hung["wall_s"] < TIMEOUT_S + 20


def test_rows_reach_sqlite_and_the_report(train_run):
    db = sqlite3.connect(train_run["out"] / "results.sqlite")
    rows = dict(db.execute("SELECT name, reason FROM results").fetchall())
    assert rows == {"a_ok": None, "b_raises": "error", "c_crashes": "crash",
                    "d_hangs": "timeout"}
    page = (train_run["out"] / "report.html").read_text()
    assert 'class="TIMEOUT"' in page and 'class="CRASH"' in page


def test_resume_reruns_only_changed_files(train_run, capsys):
    suite, out = train_run["suite"], train_run["out"]
    (suite / "b_raises.py").write_text(RAISES.replace("no model", "still no model"))
    capsys.readouterr()
    assert bench(suite, out, "--resume", "--only", "a_ok", "--only", "b_raises") == 1
    err = capsys.readouterr().err
    assert "a_ok: PASS (resumed)" in err and "b_raises: ERROR (resumed)" not in err
    doc = json.loads((out / "results.json").read_text())
    rows = {r["name"]: r for r in doc["workloads"]}
    assert rows["a_ok"]["loss_ours"] == train_run["rows"]["a_ok"]["loss_ours"]
    assert "still no model" in rows["b_raises"]["error"]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_torch_compile_reference_traces_a_loaded_workload(name):
    """The torch.compile reference (timed on CUDA only) traces the eager step of a workload
    the harness loaded: dynamo imports the module of the loss by name, so it stays
    registered (it was not, and every workload failed at stage compile-ref on the GPU)."""
    torch = pytest.importorskip("torch")
    from kernelwright.harness import training

    workload = next(w for w in training.discover(training.bundled_workloads())
                    if w.name == name)
    module = training.load(workload)
    cfg = module.SIZES["small"]
    torch.manual_seed(0)
    model = module.build(cfg).train()
    twin = copy.deepcopy(model)
    b = tuple(module.batch(cfg, 0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(lambda batch: training._eager_step(model, opt, module.loss, batch),
                         backend="eager")
    loss, norm = step(b)
    want, want_norm = training._eager_step(
        twin, torch.optim.AdamW(twin.parameters(), lr=1e-3), module.loss, b)
    assert torch.allclose(loss, want, rtol=1e-5) and torch.allclose(norm, want_norm, rtol=1e-4)
