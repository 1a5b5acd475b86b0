"""The language-model generators (optimize/llm.py): configuration, prompt, reply
parsing, and both SDKs against a fake server on 127.0.0.1 (fake_llm.py)."""

from __future__ import annotations

import re
import sys

import pytest
from fake_llm import FakeLLM, tokens_of

from kernelwright.dtypes import element_type
from kernelwright.optimize import generators as gen_mod
from kernelwright.optimize import llm
from kernelwright.optimize.generator import Attempt, Binding, KernelSpec, ProposalFailed

SOURCE = """\
@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = i32(gid.x);
    if (i < 100) { out[i] = max(in0[i], 0.0); }
}
"""


def make_spec() -> KernelSpec:
    return KernelSpec(
        key="elementwise f32[100] -> f32[100] #abc", name="relu", kind="elementwise",
        source=SOURCE,
        bindings=[Binding(0, "in0", (100,), "f32", "read"),
                  Binding(1, "out", (100,), "f32", "read_write")],
        grid=(2, 1, 1), knobs={"WG": 64, "EPT": 1},
        description="out = relu(in0) over 100 floats",
        reference="out = torch.relu(in0)",
        profile={"time_ms": 0.0123, "share": 0.25, "share_all": 0.5, "module_ms": 0.0492,
                 "kernels": 4, "index": 2})


def reply(source: str, prose: str = "Fewer branches.") -> str:
    return f"{prose}\n\n```wgsl\n{source}```\n"


def attempt(status: str, message: str, source: str = SOURCE, time_ms=None, best_ms=None):
    return Attempt("openai:m", source, None, None, status, message, time_ms, best_ms)


def openai_env(url: str, **extra) -> dict:
    env = {"KERNELWRIGHT_OPENAI_BASE_URL": url + "/v1", "KERNELWRIGHT_LLM_MAX_RETRIES": "0",
           "KERNELWRIGHT_LLM_TIMEOUT_S": "20"}
    env.update(extra)
    return env


# --- reply parsing ---------------------------------------------------------------------


def test_parse_reply_takes_the_last_wgsl_block_and_its_grid():
    text = ("Old:\n```wgsl\nfn old() {}\n```\nNew one:\n```wgsl\n// grid: 4, 2, 1\n"
            + SOURCE + "```\nDone.")
    source, grid = llm.parse_reply(text)
    assert source.startswith("// grid: 4, 2, 1\n@group(0)") and "fn old" not in source
    assert grid == (4, 2, 1)


def test_parse_reply_grid_forms_and_defaults():
    assert llm.parse_reply("```wgsl\n" + SOURCE + "```")[1] is None
    assert llm.parse_reply("```wgsl\n// grid = (7)\n" + SOURCE + "```")[1] == (7, 1, 1)
    assert llm.parse_reply("```WGSL\n//grid:3,5\n" + SOURCE + "```")[1] == (3, 5, 1)
    with pytest.raises(ProposalFailed, match="out of range"):
        llm.parse_reply("```wgsl\n// grid: 0, 1, 1\n" + SOURCE + "```")
    with pytest.raises(ProposalFailed, match="out of range"):
        llm.parse_reply("```wgsl\n// grid: 70000, 1, 1\n" + SOURCE + "```")


def test_parse_reply_accepts_a_bare_block_with_a_compute_entry_point():
    source, _ = llm.parse_reply("Here:\n```\n" + SOURCE + "```")
    assert source == SOURCE
    with pytest.raises(ProposalFailed, match="no ```wgsl block"):
        llm.parse_reply("```python\nprint('not a kernel')\n```")


def test_parse_reply_without_code_fails_clearly():
    with pytest.raises(ProposalFailed, match="no ```wgsl block"):
        llm.parse_reply("I would tile the loop, but here is no code.")
    with pytest.raises(ProposalFailed, match="empty reply"):
        llm.parse_reply("")


# --- the prompt ------------------------------------------------------------------------


def test_prompt_carries_the_spec():
    prompt = llm.build_prompt(make_spec(), [])
    for text in ("`relu` (elementwise)", "out = relu(in0) over 100 floats",
                 "out = torch.relu(in0)", "| 0 | in0 | f32 | [100] | 100 | read |",
                 "| 1 | out | f32 | [100] | 100 | read_write |",
                 "The current kernel takes 0.0123 ms on the GPU; 25.0% of the module's GPU "
                 "time; the module: 0.0492 ms in 4 kernels, this is kernel 3; 50.0% with the "
                 "same kernel's other uses in the module.",
                 "grid 2, 1, 1", "WG=64", SOURCE.strip()):
        assert text in prompt, text
    assert "Earlier attempts" not in prompt
    spec = make_spec()
    spec.bindings.insert(1, Binding(1, "in0v4", (100,), "f32", "read", alias=0))
    spec.bindings[2].index = 2
    assert "| 1 | in0v4 | f32 | [100] | 100 | read, the buffer of binding 0 viewed as vec4 |" \
        in llm.build_prompt(spec, [])
    for rule in ("same `@group(0) @binding(i)`", "NaN", "Strict fp32", "1e-4", "WGSL only",
                 "// grid: X, Y, Z", "```wgsl"):
        assert rule in llm.SYSTEM, rule


def test_prompt_history_is_bounded_recent_in_full_older_summarized():
    history = [attempt("mismatch", f"message number {i}\nsecond line {i}",
                       source=SOURCE.replace("100", str(1000 + i))) for i in range(20)]
    history[3] = attempt("improved", "timed", source=SOURCE.replace("64", "256"),
                         time_ms=0.01, best_ms=0.0123)
    history[-1] = attempt("slower", "timed", time_ms=0.02, best_ms=0.01)
    history[-2] = attempt("compile_error", "error: unknown identifier 'foo'\n" + "x" * 5000,
                          source="fn broken(")
    prompt = llm.build_prompt(make_spec(), history, full=3, summary=5)
    assert "Earlier attempts on this kernel (20)" in prompt
    assert "(12 older attempts not shown.)" in prompt
    assert "message number 11" not in prompt
    for i in range(12, 17):  # attempts 13..17: one line each, no source
        assert f"- attempt {i + 1} (openai:m): mismatch: message number {i} second line {i}" \
            in prompt
        assert f"i < {1000 + i}" not in prompt
    assert "### Attempt 18 (openai:m): mismatch" in prompt and "i < 1017" in prompt
    assert "### Attempt 19 (openai:m): compile_error" in prompt
    assert "error: unknown identifier 'foo'" in prompt and "fn broken(" in prompt
    assert "more characters)" in prompt and "x" * 5000 not in prompt
    assert "### Attempt 20 (openai:m): slower" in prompt
    assert "0.02 ms, 2.00x slower than the best then (0.01 ms)" in prompt
    # the fastest correct attempt is older than the summarized ones, yet shown in full
    assert "Fastest correct attempt so far: attempt 4, 0.01 ms." in prompt
    assert "### Fastest correct kernel so far: attempt 4 (openai:m): improved" in prompt
    assert "0.01 ms, 1.23x faster than the best then (0.0123 ms)" in prompt
    assert "@workgroup_size(256)" in prompt


# --- configuration ---------------------------------------------------------------------


def write(tmp_path, text: str):
    p = tmp_path / "llm.toml"
    p.write_text(text)
    return p


def test_config_file_then_provider_then_model_then_environment(tmp_path):
    path = write(tmp_path, """
timeout_s = 30
max_output_tokens = 1000
price_input_per_mtok = 1.0
[openai]
base_url = "http://127.0.0.1:9/v1"
model = "file-model"
max_output_tokens = 2000
[anthropic]
model = "claude-file"
[models."other-model"]
price_input_per_mtok = 3.0
price_output_per_mtok = 15.0
""")
    cfg = llm.load_config("openai", path=path, env={})
    assert (cfg.model, cfg.base_url, cfg.timeout_s, cfg.max_output_tokens) == \
        ("file-model", "http://127.0.0.1:9/v1", 30.0, 2000)
    assert cfg.price_input_per_mtok == 1.0 and cfg.price_output_per_mtok is None
    cfg = llm.load_config("openai", "other-model", path=path,
                          env={"KERNELWRIGHT_LLM_TIMEOUT_S": "5",
                               "KERNELWRIGHT_OPENAI_TIMEOUT_S": "7",
                               "KERNELWRIGHT_LLM_PRICE_OUTPUT_PER_MTOK": "20",
                               "OPENAI_API_KEY": "sk-test"})
    assert (cfg.model, cfg.timeout_s, cfg.price_input_per_mtok, cfg.price_output_per_mtok,
            cfg.api_key) == ("other-model", 7.0, 3.0, 20.0, "sk-test")
    assert cfg.cost_usd(1_000_000, 100_000) == pytest.approx(3.0 + 2.0)
    cfg = llm.load_config("anthropic", path=path, env={"ANTHROPIC_API_KEY": "ak",
                                                       "OPENAI_API_KEY": "sk"})
    assert (cfg.model, cfg.base_url, cfg.api_key) == ("claude-file", None, "ak")


def test_config_from_the_environment_alone_and_its_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(llm, "DEFAULT_CONFIG", tmp_path / "absent.toml")
    cfg = llm.load_config("openai", env={"KERNELWRIGHT_LLM_MODEL": "env-model",
                                         "KERNELWRIGHT_LLM_API_KEY_ENV": "MY_KEY",
                                         "MY_KEY": "secret", "KERNELWRIGHT_LLM_MAX_TOKENS": "500",
                                         "KERNELWRIGHT_LLM_TEMPERATURE": "0.2"})
    assert (cfg.model, cfg.api_key, cfg.max_tokens, cfg.temperature) == \
        ("env-model", "secret", 500, 0.2)
    assert cfg.cost_usd(10, 10) is None
    with pytest.raises(ValueError, match="no model for openai"):
        llm.load_config("openai", env={})
    with pytest.raises(ValueError, match="max_retries must be a number"):
        llm.load_config("openai", "m", env={"KERNELWRIGHT_LLM_MAX_RETRIES": "many"})
    with pytest.raises(ValueError, match="unknown setting 'modle'"):
        llm.load_config("openai", path=write(tmp_path, 'modle = "x"\n'), env={})
    with pytest.raises(ValueError, match="unknown table"):
        llm.load_config("openai", path=write(tmp_path, '[opnai]\nmodel = "x"\n'), env={})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        llm.load_config("openai", "m", env={llm.CONFIG_ENV: str(tmp_path / "nope.toml")})
    with pytest.raises(ValueError, match="unknown LLM provider"):
        llm.load_config("gemini", "m", env={})


def test_registry_makes_named_generators(monkeypatch, tmp_path):
    monkeypatch.setattr(llm, "DEFAULT_CONFIG", tmp_path / "absent.toml")
    monkeypatch.delenv(llm.CONFIG_ENV, raising=False)
    monkeypatch.setenv("KERNELWRIGHT_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    g = gen_mod.make("openai:my-model")
    assert isinstance(g, llm.OpenAIGenerator) and g.name == "openai:my-model"
    monkeypatch.setenv("KERNELWRIGHT_ANTHROPIC_MODEL", "claude-env")
    g = gen_mod.make("anthropic")
    assert isinstance(g, llm.AnthropicGenerator) and g.name == "anthropic:claude-env"
    assert {"openai", "anthropic"} <= set(gen_mod.names())


def test_missing_sdk_names_the_extra(monkeypatch):
    g = llm.OpenAIGenerator(llm.LLMConfig("openai", "m", base_url="http://127.0.0.1:9/v1"))
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ImportError, match=r"kernelwright\[llm\]"):
        g.propose(make_spec(), [])


# --- the SDKs against the fake server --------------------------------------------------


def test_openai_generator_round_trip_usage_and_feedback():
    better = SOURCE.replace("@workgroup_size(64)", "@workgroup_size(128)")
    with FakeLLM([reply("// grid: 1, 1, 1\n" + better), "no code here, sorry"]) as fake:
        cfg = llm.load_config("openai", "fake-model", env=openai_env(
            fake.url, KERNELWRIGHT_LLM_PRICE_INPUT_PER_MTOK="2",
            KERNELWRIGHT_LLM_PRICE_OUTPUT_PER_MTOK="8"))
        g = llm.OpenAIGenerator(cfg)
        cand = g.propose(make_spec(), [])
        assert cand.source == "// grid: 1, 1, 1\n" + better and cand.grid == (1, 1, 1)
        assert cand.note == "Fewer branches."
        body = fake.requests[0]["body"]
        assert fake.requests[0]["path"] == "/v1/chat/completions"
        assert body["model"] == "fake-model" and body["max_tokens"] == cfg.max_output_tokens
        assert "temperature" not in body
        assert body["messages"][0] == {"role": "system", "content": llm.SYSTEM}
        assert body["messages"][1]["content"] == g.last_prompt
        n_in = FakeLLM.prompt_chars(body) // 4
        n_out = tokens_of(reply("// grid: 1, 1, 1\n" + better))
        assert cand.usage["input_tokens"] == n_in and cand.usage["output_tokens"] == n_out
        assert cand.usage["cost_usd"] == pytest.approx((2 * n_in + 8 * n_out) / 1e6)

        history = [attempt("compile_error", "error: expected ';' at line 3")]
        with pytest.raises(ProposalFailed, match="no ```wgsl block") as info:
            g.propose(make_spec(), history)
        assert "error: expected ';' at line 3" in fake.user_prompt(1)
        assert info.value.usage["output_tokens"] == tokens_of("no code here, sorry")
        assert g.spent["requests"] == 2
        assert g.spent["input_tokens"] == n_in + FakeLLM.prompt_chars(fake.requests[1]["body"]) \
            // 4


def test_generator_stops_at_its_token_budget():
    with FakeLLM([reply(SOURCE), reply(SOURCE)]) as fake:
        g = llm.OpenAIGenerator(llm.load_config(
            "openai", "m", env=openai_env(fake.url, KERNELWRIGHT_LLM_MAX_TOKENS="10")))
        assert g.propose(make_spec(), []) is not None
        assert g.propose(make_spec(), []) is None
        assert len(fake.requests) == 1


def test_failed_request_is_a_failed_proposal_a_refused_one_an_error():
    with FakeLLM([500, 404, {"text": "```wgsl\n@compute fn main() {", "truncated": True}]) \
            as fake:
        g = llm.OpenAIGenerator(llm.load_config("openai", "m", env=openai_env(fake.url)))
        with pytest.raises(ProposalFailed, match="request failed"):
            g.propose(make_spec(), [])
        assert len(fake.requests) == 1  # max_retries = 0
        with pytest.raises(RuntimeError, match="refused the request"):
            g.propose(make_spec(), [])
        with pytest.raises(ProposalFailed, match="cut off at max_output_tokens = 16384"):
            g.propose(make_spec(), [])


def test_anthropic_generator_round_trip():
    pytest.importorskip("anthropic")
    with FakeLLM([reply(SOURCE, "Same kernel.")]) as fake:
        cfg = llm.load_config("anthropic", "claude-fake", env={
            "KERNELWRIGHT_ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "test-key",
            "KERNELWRIGHT_LLM_MAX_RETRIES": "0", "KERNELWRIGHT_LLM_TEMPERATURE": "0.5"})
        g = llm.AnthropicGenerator(cfg)
        cand = g.propose(make_spec(), [attempt("mismatch", "3 of 100 elements differ")])
        assert cand.source == SOURCE and cand.grid is None and cand.note == "Same kernel."
        req = fake.requests[0]
        assert req["path"] == "/v1/messages"
        body = req["body"]
        assert body["model"] == "claude-fake" and body["system"] == llm.SYSTEM
        assert body["temperature"] == 0.5 and body["max_tokens"] == cfg.max_output_tokens
        assert "3 of 100 elements differ" in fake.user_prompt(0)
        assert cand.usage["input_tokens"] == FakeLLM.prompt_chars(body) // 4
        assert "cost_usd" not in cand.usage


# --- end to end: optimize_problem driven by the fake server ----------------------------

N = 256
PROBLEM = f'''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn({N})]


def get_init_inputs():
    return []
'''


def bindings_in(body: dict) -> list[tuple[int, str, str, str]]:
    """(index, name, dtype, access) of each row of the bindings table in a request's
    prompt: the interface a candidate must declare."""
    prompt = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    table = prompt.split("## Bindings")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\w+)[^|]* \|[^|]*\|[^|]*\| (\w+)[^|]*\|$",
                      table, re.M)
    return [(int(i), name, dtype, access) for i, name, dtype, access in rows]


def scripted(expression: str, guard: str = f"{N}u"):
    """A reply function: a kernel declaring the prompt's bindings whose invocation i
    writes out[i] = `expression` (X: the first input's element i) where i < `guard`."""
    def answer(body: dict) -> str:
        rows = bindings_in(body)
        decls = [f"@group(0) @binding({i}) var<storage, {access}> {name}: "
                 f"array<{element_type(dtype)}>;" for i, name, dtype, access in rows]
        x = next(name for _, name, _, access in rows if access == "read")
        out = next(name for _, name, _, access in rows if access == "read_write")
        code = "\n".join(decls + [
            f"// grid: {N // 64}, 1, 1",
            "@compute @workgroup_size(64)",
            "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {",
            "    let i = gid.x;",
            f"    if (i < {guard}) {{ {out}[i] = {expression.replace('X', f'{x}[i]')}; }}",
            "}"])
        return f"One element per invocation.\n\n```wgsl\n{code}\n```\n"
    return answer


@pytest.mark.slow
def test_optimize_problem_end_to_end_through_the_fake_server(tmp_path, monkeypatch):
    from kernelwright.optimize.search import Settings, optimize_problem, pass_at_k
    from kernelwright.optimize.store import RunState

    monkeypatch.setenv("KERNELWRIGHT_TUNE_DB", str(tmp_path / "tune.sqlite"))
    monkeypatch.setenv(llm.CONFIG_ENV, str(write(tmp_path, """
max_retries = 0
[models."fake-model"]
price_input_per_mtok = 1.0
price_output_per_mtok = 4.0
""")))
    problem = tmp_path / "tanh_affine.py"
    problem.write_text(PROBLEM)
    replies = [
        scripted("tanhh(X) * 2.0 + 1.0"),  # 1: does not compile
        scripted("tanh(X) * 2.0 - 1.0"),  # 2: computes the wrong thing
        scripted("tanh(X) * 2.0 + 1.0", guard=f"{N // 2}u"),  # 3: cheat: half the output
        "I would unroll it, but I'll leave the code to you.",  # 4: no code
        scripted("fma(tanh(X), 2.0, 1.0)"),  # 5: correct
    ]
    with FakeLLM(replies) as fake:
        monkeypatch.setenv("KERNELWRIGHT_OPENAI_BASE_URL", fake.url + "/v1")
        lines: list[str] = []
        report = optimize_problem(
            problem, ["openai:fake-model"], attempts=5, out=tmp_path / "out",
            settings=Settings(trials=3, reps=3, warmup=1, profile_runs=1, module_trials=2),
            progress=lines.append)
    assert report.error is None, report.error
    (kr,) = report.kernels
    state = RunState(tmp_path / "out")
    try:
        history = [a for a, _ in state.attempts(report.name, kr.key)]
    finally:
        state.close()
    statuses = [a.status for a in history]
    assert statuses[:4] == ["compile_error", "mismatch", "rejected", "rejected"], lines
    assert statuses[4] in ("improved", "slower"), history[4].message
    assert "tanhh" in history[0].message
    assert "unwritten" in history[2].message  # the cheat: the NaN poison is still there
    assert "no ```wgsl block" in history[3].message
    assert len(fake.requests) == 5
    # each attempt's feedback reaches the next prompt
    for i in range(4):
        first_line = history[i].message.strip().splitlines()[0]
        assert first_line[:120] in fake.user_prompt(i + 1), (i, first_line)
        assert f"### Attempt {i + 1} (openai:fake-model): {statuses[i]}" in \
            fake.user_prompt(i + 1)
    assert "Earlier attempts" not in fake.user_prompt(0)
    # pass@k: the first correct candidate was the fifth
    assert kr.pass_at == {"openai:fake-model": 5} and kr.tries == {"openai:fake-model": 5}
    assert pass_at_k(report.kernels, 4) == 0.0 and pass_at_k(report.kernels, 5) == 1.0
    # usage: every request's tokens and cost, as the server reported them
    n_in = sum(FakeLLM.prompt_chars(r["body"]) // 4 for r in fake.requests)
    answers = [r(req["body"]) if callable(r) else r for r, req in zip(replies, fake.requests)]
    n_out = sum(tokens_of(a) for a in answers)
    assert report.tokens == n_in + n_out
    assert report.cost_usd == pytest.approx((n_in * 1.0 + n_out * 4.0) / 1e6)
    # the cheat never became the kernel: a winner, if any, is the correct one, whether it
    # was kept or dropped by the module check (on the software driver the module's
    # timing can go either way: a winner is dropped when the module is not faster)
    assert kr.source is None or "fma(tanh(" in kr.source, kr.source
    if kr.status == "improved":
        assert report.after.get("correct") and report.stored == 1
    elif kr.status == "dropped":
        assert kr.note and report.stored == 0, kr.note


def test_cli_llm_config_reaches_the_generators(tmp_path, monkeypatch, capsys):
    from kernelwright.cli.main import main

    monkeypatch.setenv(llm.CONFIG_ENV, "")  # restored after the test; the CLI sets it
    problem = tmp_path / "p.py"
    problem.write_text(PROBLEM)
    missing = tmp_path / "missing.toml"
    assert main(["optimize", str(problem), "--generators", "openai:m",
                 "--llm-config", str(missing), "--out", str(tmp_path / "out")]) == 2
    assert f"LLM config {missing} does not exist" in capsys.readouterr().err
    path = write(tmp_path, 'modle = "typo"\n')
    assert main(["optimize", str(problem), "--generators", "anthropic:m",
                 "--llm-config", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "unknown setting 'modle'" in capsys.readouterr().err
