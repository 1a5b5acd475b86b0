"""`kernelwright bench --dtype` and `--set`, and the memory columns: problems run in
float16/bfloat16 (model and float inputs cast, integer inputs not), a global of the
problem overridden after SIZES, each part of the resume key and recorded in the results,
our plan's device bytes beside PyTorch's peak (None without CUDA)."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import bench_suite as s
import pytest
import torch

from kernelwright.check.tolerance import Tolerance
from kernelwright.cli import main as cli
from kernelwright.harness import budget, problems, report, runner
from kernelwright.harness.problems import Problem, ProblemError
from kernelwright.harness.worker import new_result

EMBED = (s.HEADER + "batch, vocab, dim = 4, 10, 8\n\n\n"
         "class Model(nn.Module):\n"
         "    def __init__(self):\n"
         "        super().__init__()\n"
         "        self.embed = nn.Embedding(vocab, dim)\n\n"
         "    def forward(self, ids, x):\n"
         "        return self.embed(ids) * x\n\n\n"
         "def get_inputs():\n"
         "    return [torch.randint(0, vocab, (batch,)), torch.randn(batch, dim)]\n\n\n"
         "def get_init_inputs():\n    return []\n")


def linear(tmp_path: Path) -> Problem:
    return problems.discover(s.write_suite(tmp_path / "suite", {"linear.py": s.LINEAR}))[0]


def test_overrides_are_python_literals_named_by_an_identifier() -> None:
    assert problems.parse_override("batch_size=1") == ("batch_size", "1")
    assert problems.parse_override(" shape = (2, 3) ") == ("shape", "(2, 3)")
    assert problems.parse_override("act='gelu'") == ("act", "'gelu'")
    for bad in ("batch_size", "=1", "1x=2", "act=gelu", "n=1+"):
        with pytest.raises(ValueError):
            problems.parse_override(bad)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["bench", "--set", "act=gelu"])
    args = cli.build_parser().parse_args(["bench", "--set", "a=1", "--set", "b=(1, 2)",
                                          "--dtype", "bfloat16"])
    assert args.overrides == [("a", "1"), ("b", "(1, 2)")] and args.dtype == "bfloat16"


def test_overrides_apply_after_sizes_and_an_unknown_name_names_the_problem(
        tmp_path: Path) -> None:
    problem = linear(tmp_path)
    loaded = problems.load(problem, "small", {"batch": "3", "n_out": "5"})
    assert (loaded.module.batch, loaded.module.n_in, loaded.module.n_out) == (3, 16, 5)
    assert loaded.inputs(0)[0].shape == (3, 16)
    with pytest.raises(ProblemError, match=r"problem linear has no global 'batch_size'"):
        problems.load(problem, "small", {"batch_size": "1"})


def test_a_dtype_casts_the_model_and_float_inputs_not_integer_ones(tmp_path: Path) -> None:
    path = s.write_suite(tmp_path, {"embed.py": EMBED}) / "embed.py"
    loaded = problems.load(Problem("embed", path, 0), None, dtype="bfloat16")
    ids, x = loaded.inputs(0)
    assert ids.dtype == torch.int64 and x.dtype == torch.bfloat16
    assert loaded.build_model(0).embed.weight.dtype == torch.bfloat16
    own = problems.load(Problem("embed", path, 0), None)
    assert own.inputs(0)[1].dtype == torch.float32
    assert torch.equal(own.inputs(0)[1].to(torch.bfloat16), x)  # the same values, cast


def test_budgets_follow_the_dtype_and_the_overrides(tmp_path: Path) -> None:
    path = linear(tmp_path).path
    half = budget.estimate(path, "full", overrides={"batch": "2"}, dtype="float16")
    assert half.inputs == "(float16[2, 256])" and half.input_bytes == 2 * 256 * 2
    assert half.param_bytes == (256 * 128 + 128) * 2


def test_dtype_and_overrides_are_part_of_the_resume_key() -> None:
    keys = {runner.BenchSettings().key(), runner.BenchSettings(dtype="bfloat16").key(),
            runner.BenchSettings(dtype="float16").key(),
            runner.BenchSettings(overrides={"batch": "1"}).key(),
            runner.BenchSettings(overrides={"batch": "2"}).key()}
    assert len(keys) == 5
    config = runner.BenchSettings(dtype="float16", overrides={"batch": "1"}).worker_config(
        Problem("p", Path("p.py"), 1))
    assert (config.dtype, config.overrides) == ("float16", {"batch": "1"})
    assert json.loads(config.to_json())["overrides"] == {"batch": "1"}


def test_a_store_made_before_the_memory_columns_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE results (name TEXT NOT NULL, settings TEXT NOT NULL, "
               "file_sha TEXT, level INTEGER, compiled INTEGER, correct INTEGER, reason TEXT, "
               "error TEXT, compile_s REAL, time_ms REAL, ref_eager_ms REAL, "
               "speedup_eager REAL, ref_compile_ms REAL, speedup_compile REAL, "
               "finished_at TEXT, result TEXT NOT NULL, PRIMARY KEY (name, settings))")
    db.commit()
    db.close()
    store = runner.ResultStore(path)
    store.put({"name": "p", "dtype": "bfloat16", "plan_bytes": 672, "torch_peak_bytes": None},
              "k")
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT dtype, plan_bytes, torch_peak_bytes FROM results").fetchall() == [
        ("bfloat16", 672, None)]
    db.close()


def test_the_report_shows_the_dtype_and_memory_in_mib() -> None:
    cfg = runner.BenchSettings(dtype="bfloat16").worker_config(Problem("p", Path("p.py"), 1))
    result = {**new_result(cfg), "correct": True, "plan_bytes": 3 * 2**20,
              "torch_peak_bytes": None}
    page = report.problems_table([result])
    assert "<th>dtype</th>" in page and "<td>bfloat16</td>" in page
    assert "<th>plan mem</th>" in page and "<td>3.0 MiB</td>" in page


def test_dtype_and_set_are_not_for_training() -> None:
    assert cli.main(["bench", "--train", "--dtype", "float16"]) == 2


def bench(suite: Path, out: Path, *options: str) -> dict:
    assert cli.main(["bench", str(suite), "--size", "small", "--out", str(out), "--trials", "2",
                     "--no-alt-shape", "--timeout", "240", "--resume", *options]) == 0
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_half_precision_runs_through_the_bench(tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    suite = s.write_suite(tmp_path / "suite", {"level1/1_linear_relu.py": s.LINEAR})
    out = tmp_path / "out"
    runs = {dtype: bench(suite, out, "--set", "batch=5", *(["--dtype", dtype] if dtype else []))
            for dtype in (None, "bfloat16", "float16")}
    for dtype, document in runs.items():
        result = document["problems"][0]
        assert result["correct"], result["error"]
        assert result["dtype"] == (dtype or "float32")
        assert result["inputs"] == f"({dtype or 'float32'}[5, 16])"
        assert result["overrides"] == {"batch": "5"}
        assert document["settings"]["dtype"] == dtype
        if torch.cuda.is_available():
            assert result["torch_peak_bytes"] > 0
        else:
            assert result["torch_peak_bytes"] is None
    fp32 = runs[None]["problems"][0]["plan_bytes"]
    for dtype in ("bfloat16", "float16"):  # stored as they are: half the bytes of every buffer
        assert runs[dtype]["problems"][0]["plan_bytes"] < fp32
    assert "(resumed)" not in capsys.readouterr().err  # each dtype its own key
    db = sqlite3.connect(out / "results.sqlite")
    rows = db.execute("SELECT settings, dtype FROM results").fetchall()
    db.close()
    assert sorted(dtype for _, dtype in rows) == ["bfloat16", "float16", "float32"]
    assert len({key for key, _ in rows}) == 3
    again = bench(suite, out, "--set", "batch=5", "--dtype", "bfloat16")
    assert "(resumed)" in capsys.readouterr().err
    assert again["problems"][0]["plan_bytes"] == runs["bfloat16"]["problems"][0]["plan_bytes"]


@pytest.mark.slow
def test_an_unknown_global_fails_the_problem_with_its_name(tmp_path: Path) -> None:
    suite = s.write_suite(tmp_path / "suite", {"level1/1_linear_relu.py": s.LINEAR})
    out = tmp_path / "out"
    assert cli.main(["bench", str(suite), "--size", "small", "--out", str(out),
                     "--set", "batch_size=1", "--timeout", "240"]) == 0
    result = json.loads((out / "results.json").read_text())["problems"][0]
    assert result["reason"] == "load" and not result["loaded"]
    assert "problem level1/1_linear_relu has no global 'batch_size'" in result["error"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="the models suite's BERT needs transformers")
def test_a_models_suite_problem_in_bfloat16(tmp_path: Path) -> None:
    models = Path(problems.__file__).resolve().parents[1] / "suite" / "models"
    document = bench(models, tmp_path / "out", "--only", "003_bert", "--dtype", "bfloat16",
                     "--set", "batch_size=1")
    result = document["problems"][0]
    assert result["correct"], result["error"]
    assert result["dtype"] == "bfloat16" and result["inputs"] == "(int64[1, 7])"
    assert result["plan_bytes"] > 0


def test_a_half_run_gives_every_float_output_the_half_tolerance() -> None:
    assert Tolerance().for_dtype(torch.float32) == (1e-4, 1e-4)
    assert Tolerance().for_dtype(torch.bfloat16) == (1e-2, 1e-2)
    half_run = Tolerance(dtype=torch.bfloat16)
    assert half_run.for_dtype(torch.float32) == (1e-2, 1e-2)  # a logits.float() of a bf16 model
    assert half_run.for_dtype(torch.int64) == (0.0, 0.0)
    assert Tolerance(dtype=torch.float32).for_dtype(torch.float32) == (1e-4, 1e-4)
