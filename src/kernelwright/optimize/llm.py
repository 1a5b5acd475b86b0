"""Language-model generators: any OpenAI-compatible endpoint, and Anthropic's API.

``OpenAIGenerator`` talks to a chat-completions endpoint through the ``openai`` SDK
(hosted, or a local server such as vLLM, llama.cpp or Ollama through ``base_url``);
``AnthropicGenerator`` talks to the messages API through the ``anthropic`` SDK. Both
are registered as ``"openai"`` and ``"anthropic"``, so ``make("openai:MODEL")`` gives
one. The SDKs are optional (``pip install kernelwright[llm]``) and imported when the
first request is made.

Each ``propose`` is one stateless request: a system text with the task and its rules,
and one user message with the kernel's spec (source, bindings, grid, description,
reference, profile) and the attempt history (the most recent ``history_full``
attempts in full with their source and feedback, older ones one line each). The
reply must hold the kernel in a fenced ```wgsl block, optionally with a
``// grid: X, Y, Z`` line. A reply without one (or cut off at the token limit) and a
request that failed after the SDK's retries raise ``ProposalFailed``, which the search
loop records as a failed attempt so that the next prompt says so; a request the
endpoint refuses (bad request, key, permission, unknown model) raises RuntimeError,
which ends the generator's turn.

Configuration, later sources overriding earlier ones:

1. the defaults of ``LLMConfig``;
2. a TOML file: ``--llm-config PATH`` (which sets ``KERNELWRIGHT_LLM_CONFIG``), else
   ``~/.config/kernelwright/llm.toml`` when it exists. Top-level keys apply to every
   provider, a ``[openai]`` / ``[anthropic]`` table to that provider, and a
   ``[models."NAME"]`` table to that model (prices, say);
3. environment variables ``KERNELWRIGHT_LLM_<FIELD>`` (every provider), then
   ``KERNELWRIGHT_OPENAI_<FIELD>`` / ``KERNELWRIGHT_ANTHROPIC_<FIELD>``.

The model is the one in the generator's name (``openai:MODEL``), else the one these
sources give; its ``[models."NAME"]`` table applies after the provider's table and
before the environment.

The API key is ``api_key`` when set, else the environment variable named by
``api_key_env`` (``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` by default). A local
OpenAI-compatible server usually needs none; a placeholder is sent then.

Every candidate carries ``usage``: input and output tokens of its request and, when
prices per million tokens are configured, its cost in USD. The search loop adds these
up against the run's budget; a generator also stops (``propose`` returns None) once
its own ``max_tokens`` or ``max_cost_usd`` is spent.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kernelwright.optimize.generator import (
    Attempt,
    Candidate,
    KernelSpec,
    ProposalFailed,
    register,
)

PROVIDERS = ("openai", "anthropic")
CONFIG_ENV = "KERNELWRIGHT_LLM_CONFIG"
DEFAULT_CONFIG = Path("~/.config/kernelwright/llm.toml")
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
EXTRA_HINT = "pip install 'kernelwright[llm]'"

MESSAGE_CHARS = 3000  # of each attempt's feedback shown in full
SUMMARY_CHARS = 160  # of each older attempt's one-line summary
MAX_GRID = 65535  # WebGPU's default maxComputeWorkgroupsPerDimension
REFUSED = (400, 401, 403, 404, 422)  # HTTP statuses no retry or other prompt would change


@dataclass
class LLMConfig:
    """How to reach one model and how much it may spend."""

    provider: str  # "openai" | "anthropic"
    model: str | None = None
    base_url: str | None = None  # None: the SDK's default (or OPENAI_BASE_URL, ...)
    api_key: str | None = None  # normally left unset: read from api_key_env
    api_key_env: str | None = None  # None: OPENAI_API_KEY / ANTHROPIC_API_KEY
    timeout_s: float = 600.0  # per request
    max_retries: int = 2  # the SDK's retries of connection errors, 429 and 5xx
    temperature: float | None = None  # None: the model's default
    max_output_tokens: int = 16384  # per reply
    # OpenAI only: the request field for max_output_tokens; None: "max_completion_tokens"
    # for OpenAI's own API, "max_tokens" for any other endpoint (local servers)
    max_tokens_field: str | None = None
    price_input_per_mtok: float | None = None  # USD per million input tokens
    price_output_per_mtok: float | None = None  # USD per million output tokens
    max_tokens: int | None = None  # this generator's total tokens (input + output) per run
    max_cost_usd: float | None = None  # this generator's total cost per run
    history_full: int = 3  # most recent attempts shown with source and full feedback
    history_summary: int = 12  # older attempts shown as one line each (older still: counted)

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.price_input_per_mtok is None and self.price_output_per_mtok is None:
            return None
        return (input_tokens * (self.price_input_per_mtok or 0.0)
                + output_tokens * (self.price_output_per_mtok or 0.0)) / 1e6


FIELDS = {f.name: f for f in dataclasses.fields(LLMConfig) if f.name != "provider"}


def _coerce(name: str, value, source: str):
    """`value` (from TOML or an environment string) as the type of field `name`."""
    kind = FIELDS[name].type.split("|")[0].strip()  # "int", "float" or "str"
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    try:
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind == "float":
            return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: {name} must be a number, not {value!r}") from None
    if not isinstance(value, str):
        raise ValueError(f"{source}: {name} must be a string, not {value!r}")
    return value


def _read_toml(path: Path) -> dict:
    # tomli is an optional dependency (Python 3.10 only): imported when a config is read
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ImportError(f"reading {path} on Python 3.10 needs tomli: "
                              f"{EXTRA_HINT}") from None
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: {exc}") from None


def config_path(path: str | Path | None = None, env=None) -> Path | None:
    """The config file to read: `path`, else $KERNELWRIGHT_LLM_CONFIG, else the default
    one when it exists. A file named explicitly must exist."""
    named = path or (os.environ if env is None else env).get(CONFIG_ENV)
    if named:
        p = Path(named).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"LLM config {p} does not exist")
        return p
    p = DEFAULT_CONFIG.expanduser()
    return p if p.is_file() else None


def load_config(provider: str, model: str | None = None, path: str | Path | None = None,
                env: dict | None = None) -> LLMConfig:
    """The configuration of `provider` for `model` (see the module text for the order)."""
    if provider not in PROVIDERS:
        raise ValueError(f"unknown LLM provider {provider!r}; known: {', '.join(PROVIDERS)}")
    env = os.environ if env is None else env
    values: dict = {}

    def apply(table: dict, source: str) -> None:
        for k, v in table.items():
            if k not in FIELDS:
                raise ValueError(f"{source}: unknown setting {k!r}; known: "
                                 f"{', '.join(FIELDS)}")
            values[k] = _coerce(k, v, source)

    file = config_path(path, env)
    data = _read_toml(file) if file is not None else {}
    unknown = [k for k, v in data.items()
               if isinstance(v, dict) and k not in PROVIDERS and k != "models"]
    if unknown:
        raise ValueError(f"{file}: unknown table(s) {unknown}; known: "
                         f"{', '.join(PROVIDERS)}, models")
    apply({k: v for k, v in data.items() if not isinstance(v, dict)}, str(file))
    apply(data.get(provider, {}), f"{file} [{provider}]")
    env_values: dict = {}
    for prefix in ("KERNELWRIGHT_LLM_", f"KERNELWRIGHT_{provider.upper()}_"):
        for name in FIELDS:
            if prefix + name.upper() in env:
                env_values[name] = _coerce(name, env[prefix + name.upper()],
                                           prefix + name.upper())
    model = model or env_values.get("model") or values.get("model")
    per_model = data.get("models", {}).get(model, {}) if model else {}
    apply({k: v for k, v in per_model.items() if k != "model"},
          f"{file} [models.{model!r}]")
    values.update(env_values)
    values["model"] = model
    cfg = LLMConfig(provider=provider, **values)
    if not cfg.model:
        raise ValueError(f"no model for {provider}: name it ({provider}:MODEL), or set "
                         f"KERNELWRIGHT_LLM_MODEL or `model` in the LLM config file")
    if cfg.api_key is None:
        cfg.api_key = env.get(cfg.api_key_env or KEY_ENV[provider]) or None
    return cfg


# ---------------------------------------------------------------------------------------
# The prompt

SYSTEM = """\
You optimize one GPU compute kernel written in WGSL (WebGPU's shading language). It is \
one kernel of a PyTorch module that kernelwright compiled; it runs through wgpu on \
Vulkan, Metal or Direct3D 12. Write a faster kernel that computes exactly the same \
output.

Rules (a candidate that breaks one is rejected):
- Keep the interface: the same `@group(0) @binding(i)` declarations with the same \
names, element types and access modes, in the same order; the entry point is \
`@compute ... fn main`. The inputs are read-only; the last binding is the output.
- Compute the same thing for every input: inputs are fresh random values (normal, \
uniform, heavy-tailed) on every check, and the output buffer is filled with NaN \
before each run, so every output element must be written, every time. Do not rely on \
particular input values, on values left over from an earlier run, or on anything \
outside the bound buffers; read bound buffers only within their sizes.
- Strict fp32: all floating-point arithmetic in f32 (no f16, no lower-precision \
tricks). Every element is compared with the reference: |got - want| <= 1e-4 * \
max(1, max |want|). Reordering sums is fine within that tolerance.
- WGSL only, no extensions; stay within WebGPU's default limits (at most 256 \
invocations per workgroup, 16 KiB of workgroup memory, 65535 workgroups per grid \
dimension). Shapes are fixed: you may write them as constants.
- You may change everything inside the kernel: workgroup size, tiling, work per \
invocation, memory access order, loop structure, workgroup memory. If the number of \
workgroups dispatched changes, say so in a line `// grid: X, Y, Z` inside the code; \
otherwise the current grid is used.

Reply with at most a few sentences on what you changed and why it is faster, then \
the complete kernel in exactly one fenced block that starts with ```wgsl."""


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _grid_text(grid) -> str:
    return ", ".join(str(int(g)) for g in grid)


def _timing(a: Attempt) -> str:
    if a.time_ms is None:
        return ""
    if a.best_ms:
        ratio = a.time_ms / a.best_ms
        word = "slower" if ratio >= 1 else "faster"
        factor = ratio if ratio >= 1 else 1 / ratio
        return f"{a.time_ms:.4g} ms, {factor:.2f}x {word} than the best then ({a.best_ms:.4g} ms)"
    return f"{a.time_ms:.4g} ms"


def format_profile(profile: dict) -> str:
    """The kernel's GPU time and its share of the module's, in words."""
    p = dict(profile)
    t, share, share_all = p.pop("time_ms", None), p.pop("share", None), p.pop("share_all", None)
    module_ms, kernels, index = p.pop("module_ms", None), p.pop("kernels", None), \
        p.pop("index", None)
    parts = []
    if t is not None:
        parts.append(f"The current kernel takes {t:.4g} ms on the GPU")
    if share is not None:
        parts.append(f"{100 * share:.1f}% of the module's GPU time")
    if module_ms is not None or kernels is not None:
        where = [f"{module_ms:.4g} ms" if module_ms is not None else "",
                 f"{kernels} kernels" if kernels is not None else ""]
        parts.append("the module: " + " in ".join(w for w in where if w)
                     + (f", this is kernel {index + 1}" if index is not None else ""))
    if share_all is not None and share is not None and share_all > share + 1e-9:
        parts.append(f"{100 * share_all:.1f}% with the same kernel's other uses in the module")
    parts += [f"{k}: {v}" for k, v in p.items()]
    return "; ".join(parts) + "." if parts else ""


def format_spec(spec: KernelSpec) -> str:
    """The kernel's spec as Markdown: what it computes, its interface and its cost."""
    lines = [f"# Kernel `{spec.name}` ({spec.kind})", "", spec.description.strip(), ""]
    if spec.reference.strip():
        lines += ["## Reference computation", "", "```", spec.reference.strip(), "```", ""]
    lines += ["## Bindings (group 0)", "",
              "| binding | name | dtype | shape | elements | access |",
              "| --- | --- | --- | --- | --- | --- |"]
    for b in spec.bindings:
        n = 1
        for d in b.shape:
            n *= int(d)
        dtype = "bool (stored as u32)" if b.dtype == "bool" else b.dtype
        access = b.access if b.alias is None else \
            f"{b.access}, the buffer of binding {b.alias} viewed as vec4"
        lines.append(f"| {b.index} | {b.name} | {dtype} | {list(b.shape)} | {n} | {access} |")
    lines.append("")
    profile = format_profile(spec.profile or {})
    if profile:
        lines += ["## Profile", "", profile, ""]
    knobs = (" (template knobs: " + ", ".join(f"{k}={v}" for k, v in spec.knobs.items())
             + ")") if spec.knobs else ""
    lines += [f"## Current kernel: grid {_grid_text(spec.grid)}{knobs}", "", "```wgsl",
              spec.source.strip(), "```"]
    return "\n".join(lines)


def _full_attempt(i: int, a: Attempt, title: str) -> list[str]:
    lines = [f"### {title} {i} ({a.generator}): {a.status}", ""]
    if a.time_ms is not None:
        lines += [f"Time: {_timing(a)}.", ""]
    if a.message.strip():
        lines += ["```text", _clip(a.message, MESSAGE_CHARS), "```", ""]
    grid = f" (grid {_grid_text(a.grid)})" if a.grid else ""
    if a.source.strip():
        lines += [f"Its source{grid}:", "", "```wgsl", a.source.strip(), "```", ""]
    return lines


def format_history(history: list[Attempt], full: int, summary: int) -> str:
    """Earlier attempts, oldest first: the last `full` with source and feedback, the
    `summary` before them one line each, any older ones only counted; the fastest
    correct one in full as well when it is older than the last `full`."""
    if not history:
        return ""
    lines = [f"## Earlier attempts on this kernel ({len(history)})", ""]
    correct = [i for i, a in enumerate(history)
               if a.time_ms is not None and a.status in ("improved", "slower")]
    best = min(correct, key=lambda i: history[i].time_ms) if correct else None
    if best is not None:
        lines += [f"Fastest correct attempt so far: attempt {best + 1}, "
                  f"{history[best].time_ms:.4g} ms.", ""]
    n_recent = min(len(history), max(0, full))
    n_older = len(history) - n_recent
    n_shown = min(n_older, max(0, summary))
    if n_older > n_shown:
        lines.append(f"({n_older - n_shown} older attempts not shown.)")
    for i in range(n_older - n_shown, n_older):
        a = history[i]
        msg = " ".join(a.message.split())
        msg = msg if len(msg) <= SUMMARY_CHARS else msg[:SUMMARY_CHARS] + "..."
        extra = f" [{_timing(a)}]" if a.time_ms is not None else ""
        lines.append(f"- attempt {i + 1} ({a.generator}): {a.status}{extra}: {msg}")
    if n_older:
        lines.append("")
    if best is not None and best < n_older:
        lines += _full_attempt(best + 1, history[best], "Fastest correct kernel so far: attempt")
    for i in range(n_older, len(history)):
        lines += _full_attempt(i + 1, history[i], "Attempt")
    return "\n".join(lines).rstrip()


def build_prompt(spec: KernelSpec, history: list[Attempt], full: int = 3,
                 summary: int = 12) -> str:
    """The user message of one request."""
    parts = [format_spec(spec)]
    hist = format_history(history, full, summary)
    if hist:
        parts.append(hist)
        parts.append("Learn from these attempts: fix what failed, and do not repeat an "
                     "attempt that was slower.")
    parts.append("Write the faster kernel now.")
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------
# The reply

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)
_GRID = re.compile(r"//[ \t]*grid[ \t]*[:=][ \t]*\(?[ \t]*(\d+)(?:[ \t]*,[ \t]*(\d+))?"
                   r"(?:[ \t]*,[ \t]*(\d+))?", re.I)


def parse_reply(text: str) -> tuple[str, tuple[int, int, int] | None]:
    """The kernel and its grid (None: unchanged) in a model's reply. The code is the
    last ```wgsl block (a bare ``` block holding `@compute` when there is none); the
    grid is a `// grid: X, Y, Z` line in it (missing dimensions are 1). Raises
    ProposalFailed when there is no code or the grid is not usable."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text or "")]
    code = [b for lang, b in blocks if lang == "wgsl"]
    if not code:
        code = [b for lang, b in blocks if lang == "" and "@compute" in b]
    if not code:
        what = "an empty reply" if not (text or "").strip() else "no ```wgsl block"
        raise ProposalFailed(f"the reply held {what}; the kernel must come in one fenced "
                             f"block that starts with ```wgsl")
    source = code[-1].strip() + "\n"
    grid = None
    m = _GRID.search(source)
    if m:
        dims = [int(g) if g else 1 for g in m.groups()]
        if not all(1 <= d <= MAX_GRID for d in dims):
            raise ProposalFailed(f"grid {tuple(dims)} is out of range: each dimension must be "
                                 f"1 to {MAX_GRID}")
        grid = tuple(dims)
    return source, grid


def _note(text: str) -> str:
    """The reply's prose before the code, shortened: the model's own summary."""
    prose = " ".join(_FENCE.sub(" ", text or "").split())
    return prose if len(prose) <= 300 else prose[:300] + "..."


# ---------------------------------------------------------------------------------------
# The generators


@dataclass
class _Reply:
    text: str
    input_tokens: int
    output_tokens: int
    truncated: bool = False  # cut off at max_output_tokens


class LLMGenerator:
    """One model: builds the prompt, sends it, parses the reply and accounts its usage.
    Subclasses implement `_complete(system, prompt)` for their SDK."""

    provider = ""
    sdk = ""

    def __init__(self, config: LLMConfig):
        self.config = config
        self.name = f"{config.provider}:{config.model}"
        self.spent = {"requests": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
        self.last_prompt: str | None = None
        self._client = None

    @classmethod
    def from_name(cls, model: str | None, path: str | Path | None = None) -> LLMGenerator:
        return cls(load_config(cls.provider, model, path))

    def budget_left(self) -> bool:
        c, s = self.config, self.spent
        if c.max_tokens is not None and s["input_tokens"] + s["output_tokens"] >= c.max_tokens:
            return False
        return c.max_cost_usd is None or s["cost_usd"] < c.max_cost_usd

    def propose(self, spec: KernelSpec, history: list[Attempt]) -> Candidate | None:
        if not self.budget_left():
            return None
        prompt = build_prompt(spec, history, self.config.history_full,
                              self.config.history_summary)
        self.last_prompt = prompt
        start = time.perf_counter()
        reply = self._complete(SYSTEM, prompt)
        usage = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                 "requests": 1, "seconds": round(time.perf_counter() - start, 3)}
        cost = self.config.cost_usd(reply.input_tokens, reply.output_tokens)
        if cost is not None:
            usage["cost_usd"] = cost
        self.spent["requests"] += 1
        self.spent["input_tokens"] += reply.input_tokens
        self.spent["output_tokens"] += reply.output_tokens
        self.spent["cost_usd"] += cost or 0.0
        try:
            source, grid = parse_reply(reply.text)
        except ProposalFailed as exc:
            if reply.truncated:
                exc.args = (f"{exc.args[0]} (the reply was cut off at max_output_tokens = "
                            f"{self.config.max_output_tokens})",)
            exc.usage = usage
            raise
        return Candidate(source=source, grid=grid, note=_note(reply.text), usage=usage)

    def _import(self):
        # openai and anthropic are optional dependencies (the llm extra): imported on use
        try:
            return __import__(self.sdk)
        except ImportError:
            raise ImportError(f"the {self.provider} generator needs the `{self.sdk}` package: "
                              f"{EXTRA_HINT}") from None

    def _failed(self, exc: Exception, status: int | None) -> Exception:
        """What a request's failure (after the SDK's retries) becomes: a failed attempt,
        or, for a request the endpoint refuses as such (bad request, key, permission,
        unknown model), an error that ends this generator's turn."""
        if status in REFUSED:
            return RuntimeError(f"{self.name}: the endpoint refused the request: {exc}")
        return ProposalFailed(f"{self.name}: request failed: {exc}")

    def _complete(self, system: str, prompt: str) -> _Reply:  # pragma: no cover - abstract
        raise NotImplementedError


class OpenAIGenerator(LLMGenerator):
    """Chat completions on any OpenAI-compatible endpoint (`base_url`)."""

    provider = "openai"
    sdk = "openai"

    def client(self):
        if self._client is None:
            openai = self._import()
            c = self.config
            key = c.api_key
            if key is None and c.base_url:
                key = "unused"  # local servers ignore it; the SDK requires one
            self._client = openai.OpenAI(base_url=c.base_url, api_key=key,
                                         timeout=c.timeout_s, max_retries=c.max_retries)
        return self._client

    def _complete(self, system: str, prompt: str) -> _Reply:
        c = self.config
        openai = self._import()
        field_name = c.max_tokens_field or ("max_tokens" if c.base_url
                                            else "max_completion_tokens")
        kwargs = {field_name: c.max_output_tokens}
        if c.temperature is not None:
            kwargs["temperature"] = c.temperature
        try:
            resp = self.client().chat.completions.create(
                model=c.model, messages=[{"role": "system", "content": system},
                                         {"role": "user", "content": prompt}], **kwargs)
        except openai.APIError as exc:
            raise self._failed(exc, getattr(exc, "status_code", None)) from exc
        choice = resp.choices[0] if resp.choices else None
        text = choice.message.content if choice is not None else ""
        u = resp.usage
        return _Reply(text or "", int(getattr(u, "prompt_tokens", 0) or 0),
                      int(getattr(u, "completion_tokens", 0) or 0),
                      getattr(choice, "finish_reason", None) == "length")


class AnthropicGenerator(LLMGenerator):
    """Anthropic's messages API (`base_url` for a proxy or a test server)."""

    provider = "anthropic"
    sdk = "anthropic"

    def client(self):
        if self._client is None:
            anthropic = self._import()
            c = self.config
            self._client = anthropic.Anthropic(base_url=c.base_url, api_key=c.api_key,
                                               timeout=c.timeout_s, max_retries=c.max_retries)
        return self._client

    def _complete(self, system: str, prompt: str) -> _Reply:
        c = self.config
        anthropic = self._import()
        kwargs = {}
        if c.temperature is not None:  # as a raw field: newer SDKs no longer take it
            kwargs["extra_body"] = {"temperature": c.temperature}
        try:
            resp = self.client().messages.create(
                model=c.model, system=system, max_tokens=c.max_output_tokens,
                messages=[{"role": "user", "content": prompt}], **kwargs)
        except anthropic.APIError as exc:
            raise self._failed(exc, getattr(exc, "status_code", None)) from exc
        text = "".join(getattr(b, "text", "") for b in resp.content
                       if getattr(b, "type", "") == "text")
        u = resp.usage
        return _Reply(text, int(getattr(u, "input_tokens", 0) or 0),
                      int(getattr(u, "output_tokens", 0) or 0),
                      getattr(resp, "stop_reason", None) == "max_tokens")


register("openai", OpenAIGenerator.from_name)
register("anthropic", AnthropicGenerator.from_name)
