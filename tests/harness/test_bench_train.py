"""`kernelwright bench --train` with each workload in a worker process of its own: a
workload that raises, crashes its process or hangs costs only its own row (with the
stage it was in), the others are judged; --resume reuses the rows of unchanged files; the
float64 control beside the gate. Tiny workloads on the software driver."""

from __future__ import annotations

import copy
import json
import math
import sqlite3
from pathlib import Path

import pytest
import torch

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


STEPS = 2


def bench(suite: Path, out: Path, *extra: str) -> int:
    return cli.main(["bench", "--train", str(suite), "--out", str(out), "--size", "small",
                     "--steps", str(STEPS), "--timeout", str(TIMEOUT_S), *extra])


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
    return {"suite": suite, "out": out, "code": code, "doc": doc,
            "page": (out / "report.html").read_text(),
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


def test_the_float64_control_is_recorded_beside_the_gate(train_run):
    """The control's curves, parameter distances, verdict and wall time reach results.json,
    SQLite and the report; a correct step is as close to float64 as PyTorch fp32 is."""
    from kernelwright.harness import training

    row = train_run["rows"]["a_ok"]
    assert row["control"] == "PASS", row.get("control_error")
    assert row["control_error"] is None and row["control_s"] > 0
    for key in ("loss_f64", "rel_ours_f64", "rel_torch_f64", "loss_nudged", "rel_nudged_f64"):
        assert len(row[key]) == STEPS and all(math.isfinite(v) and v >= 0 for v in row[key])
    assert row["loss_f64"] != row["loss_torch"]  # a float64 run, not the fp32 one again
    assert row["loss_nudged"] != row["loss_torch"]  # fp32 from weights an ulp away
    assert 0 <= row["param_nudged_f64"] < 1
    # both fp32 runs are close to float64 here: a few steps of a tiny model
    assert max(row["rel_ours_f64"] + row["rel_torch_f64"]) < 1e-5
    assert 0 <= row["param_ours_f64"] < 1 and 0 <= row["param_torch_f64"] < 1
    assert row["control_loss_ratio"] <= training.CONTROL_FACTOR
    assert row["control_param_ratio"] <= training.CONTROL_FACTOR
    failed = [train_run["rows"][n] for n in ("b_raises", "c_crashes", "d_hangs")]
    assert all(r.get("control") is None for r in failed)
    doc = train_run["doc"]
    assert doc["settings"]["control"] is True and "float64" in doc["control"]
    assert doc["summary"] == {"workloads": 4, "passed": 1, "control_passed": 1}
    db = sqlite3.connect(train_run["out"] / "results.sqlite")
    (stored,) = db.execute("SELECT result FROM results WHERE name = 'a_ok'").fetchone()
    assert json.loads(stored)["rel_ours_f64"] == row["rel_ours_f64"]
    page = train_run["page"]
    assert 'id="control-a_ok"' in page and page.count('class="kernelwright-f64"') == 1
    assert page.count('class="torch-f64"') == 1 and page.count('class="nudged-f64"') == 1


def test_the_summary_says_both_verdicts():
    from kernelwright.harness import training

    rows = [{"status": "PASS", "control": "PASS"}, {"status": "FAIL", "control": "PASS"},
            {"status": "FAIL", "control": "FAIL"}]
    assert training.summary_line(rows, 200, control=True) == (
        "1 of 3 within 0.001 of PyTorch over 200 steps; 2 of 3 as close to float64 as "
        f"PyTorch fp32 is (within {training.CONTROL_FACTOR:g}x)")
    assert training.summary_line(rows, 200, control=False) == (
        "1 of 3 within 0.001 of PyTorch over 200 steps")


def test_nudged_weights_are_one_ulp_away():
    """The control's second PyTorch fp32 run starts from every weight moved by one unit in
    the last place, up or down: the same model up to a rounding difference."""
    from kernelwright.harness import training

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    before = [p.detach().clone() for p in model.parameters()]
    training.nudged(model, seed=3)
    moved_up = 0
    for old, new in zip(before, model.parameters()):
        up = torch.nextafter(old, torch.full_like(old, math.inf))
        down = torch.nextafter(old, torch.full_like(old, -math.inf))
        assert bool(((new == up) | (new == down)).all())
        moved_up += int((new == up).sum())
    total = sum(p.numel() for p in before)
    assert 0.3 * total < moved_up < 0.7 * total  # both ways, at random


def test_control_rule():
    """Running maxima of the relative loss differences, floored at fp32's rounding: ours
    may be up to CONTROL_FACTOR times further from float64 than PyTorch fp32, no more."""
    from kernelwright.harness import training as t

    k, floor = t.CONTROL_FACTOR, t.CONTROL_LOSS_FLOOR
    drift = [1e-6 * 2 ** i for i in range(10)]
    assert t.control_failures([k * d for d in drift], drift, 0.0, 0.0) == []
    (bad,) = t.control_failures([1.5 * k * d for d in drift], drift, 0.0, 0.0)
    assert bad.startswith("loss at step 0:")  # at step 0 torch is at the floor already
    # torch's difference falling back near zero at one step proves nothing: its running max
    assert t.control_failures([1e-4, 2e-4], [1e-4, 1e-12], 0.0, 0.0) == []
    # both at rounding level: not judged
    assert t.control_failures([0.9 * floor * k, 0.0], [0.0, 0.0], 0.0, 0.0) == []
    (bad,) = t.control_failures([0.0, 2 * floor * k], [0.0, 0.0], 0.0, 0.0)
    assert bad.startswith("loss at step 1:")
    (bad,) = t.control_failures([1e-6, float("nan")], [1e-6, 1e-6], 0.0, 0.0)
    assert bad.startswith("loss at step 1:")
    (bad,) = t.control_failures([0.0], [0.0], 1.0, 0.1)
    assert bad.startswith("parameters:")
    assert t.control_failures([0.0], [0.0], 0.1 * k, 0.1) == []
    assert t.control_failures([0.0], [0.0], t.CONTROL_PARAM_FLOOR, 0.0) == []


@pytest.mark.parametrize("lr_scale, verdict", [(1.0, "PASS"), (1.01, "FAIL")])
def test_a_learning_rate_1_percent_off_fails_the_control(tmp_path, monkeypatch, lr_scale,
                                                         verdict):
    """The compiled step given a learning rate 1% off: within the 1e-3 gate over a few
    steps, but many times further from float64 than PyTorch fp32: the control fails it."""
    from kernelwright.harness import training

    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    ours = training.our_optimizer
    monkeypatch.setattr(training, "our_optimizer", lambda lr: ours(lr_scale * lr))
    settings = training.TrainSettings(size="small", steps=4, compile_ref=False,
                                      timed_steps=0)
    result = training.run_workload(training.Workload("tiny", path), settings)
    assert result["status"] == "PASS", result.get("error")  # the gate cannot tell
    assert result["control"] == verdict, result.get("control_error")
    if verdict == "FAIL":
        assert "from float64 vs PyTorch fp32's" in result["control_error"]
        assert result["control_loss_ratio"] > training.CONTROL_FACTOR


def test_without_the_control_nothing_is_trained_in_float64(train_run, capsys):
    """--no-train-control: no float64 run, and rows measured with it are not resumed."""
    suite, out = train_run["suite"], train_run["out"]
    capsys.readouterr()
    assert bench(suite, out, "--resume", "--only", "a_ok", "--no-train-control") == 0
    captured = capsys.readouterr()
    assert "a_ok: PASS (resumed)" not in captured.err
    assert f"1 of 1 within 0.001 of PyTorch over {STEPS} steps;" in captured.out
    doc = json.loads((out / "results.json").read_text())
    (row,) = doc["workloads"]
    assert row["status"] == "PASS" and "loss_f64" not in row and row.get("control") is None
    assert doc["settings"]["control"] is False and doc["control"].startswith("off")
    assert 'id="control-a_ok"' not in (out / "report.html").read_text()
