"""Report: one self-contained HTML page with the table and the plots.

No script, no stylesheet or font from elsewhere: the page is plain HTML with
inline CSS and inline SVG, so it opens anywhere, offline, and can be attached
to an issue. It shows the run's settings (device, precision mode, how the
reference was timed), the summary table from metrics.py, three plots (speedup
per problem, geometric-mean speedup per level, compile time per problem) and a
table of every problem with its status, error, dtype, numbers and memory (our plan's
device bytes against PyTorch's peak over a reference call, in MiB).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .metrics import FAST_P
from .progress import status_of

LEVEL_COLORS = ["#6b7280", "#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626"]
GOOD, BAD, GREY = "#16a34a", "#dc2626", "#9ca3af"

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #111827; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #d1d5db; padding: 3px 8px; text-align: right; }
th { background: #f3f4f6; }
td.name, td.error { text-align: left; }
td.error { max-width: 40em; overflow-wrap: anywhere; font-size: 0.9em; }
tr.PASS td.status { color: #15803d; font-weight: bold; }
tr.FAIL td.status, tr.CRASH td.status, tr.TIMEOUT td.status, tr.MEMORY td.status,
tr.OOM td.status {
  color: #b91c1c; font-weight: bold; }
tr.ERROR td.status { color: #92400e; font-weight: bold; }
figure { margin: 1.5em 0; }
figcaption { font-weight: bold; margin-bottom: 0.3em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 1em; }
dl.meta dt { font-weight: bold; }
dl.meta dd { margin: 0; }
.flag { color: #b45309; }
svg text { font: 11px system-ui, sans-serif; fill: #374151; }
"""


@dataclass
class Bar:
    label: str
    value: float
    color: str
    tooltip: str


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def num(value: float | None, spec: str = ".3g", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def mib(n: int | None) -> str:
    """Bytes as MiB, "-" when unknown."""
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    for exponent in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0 ** exponent
            if lo <= value <= hi:
                ticks.append(value)
    return ticks


def bar_chart(chart_id: str, bars: list[Bar], unit: str, baseline: float | None = None,
              width: int = 960, height: int = 300) -> str:
    """A bar chart on a log axis as inline SVG; bars grow from `baseline` when given."""
    if not bars:
        return f'<p id="{chart_id}" class="empty">nothing to plot</p>'
    left, right, top, bottom = 60, 10, 10, 90 if len(bars) <= 40 else 20
    values = [b.value for b in bars] + ([baseline] if baseline else [])
    lo, hi = min(values) / 1.5, max(values) * 1.5
    span = math.log10(hi) - math.log10(lo)
    plot_w, plot_h = width - left - right, height - top - bottom

    def y(value: float) -> float:
        return top + plot_h * (1 - (math.log10(value) - math.log10(lo)) / span)

    parts = [(f'<svg id="{chart_id}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img">')]
    for tick in log_ticks(lo, hi):
        ty = y(tick)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{ty:.1f}" y2="{ty:.1f}" '
                     'stroke="#e5e7eb"/>')
        parts.append(f'<text x="{left - 4}" y="{ty + 4:.1f}" text-anchor="end">'
                     f'{tick:g}{esc(unit)}</text>')
    base_y = y(baseline) if baseline else top + plot_h
    step = plot_w / len(bars)
    bar_w = max(1.0, step * 0.8)
    for i, bar in enumerate(bars):
        x = left + i * step + (step - bar_w) / 2
        vy = y(bar.value)
        y0, y1 = sorted((vy, base_y))
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{y0:.1f}" width="{bar_w:.1f}" '
                     f'height="{max(0.5, y1 - y0):.1f}" fill="{bar.color}">'
                     f'<title>{esc(bar.tooltip)}</title></rect>')
        if len(bars) <= 40:
            label = bar.label if len(bar.label) <= 22 else "..." + bar.label[-19:]
            lx, ly = x + bar_w / 2, top + plot_h + 8
            parts.append(f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="end" '
                         f'transform="rotate(-45 {lx:.1f} {ly:.1f})">{esc(label)}</text>')
    if baseline:
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{base_y:.1f}" '
                     f'y2="{base_y:.1f}" stroke="#111827" stroke-dasharray="4 3"/>')
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" '
                 'stroke="#6b7280"/>')
    parts.append("</svg>")
    return "".join(parts)


def level_color(level: int) -> str:
    return LEVEL_COLORS[level % len(LEVEL_COLORS)]


def speedup_plot(results: list[dict[str, Any]], against: str) -> str:
    key = f"speedup_{against}"
    timed = sorted((r for r in results if r.get("correct") and r.get(key)),
                   key=lambda r: r[key])
    bars = [Bar(r["name"], r[key], GOOD if r[key] >= 1 else BAD,
                f"{r['name']} (level {r.get('level')}): {r[key]:.3g}x vs {against}")
            for r in timed]
    return bar_chart(f"plot-speedup-{against}", bars, "x", baseline=1.0)


def level_plot(summary: dict[str, Any]) -> str:
    bars = []
    for level, group in summary["levels"].items():
        for against in ("eager", "compile"):
            value = group.get(f"geomean_speedup_{against}")
            if value:
                bars.append(Bar(f"level {level} vs {against}", value,
                                level_color(int(level)) if against == "eager" else GREY,
                                f"level {level}: geomean {value:.3g}x vs {against} "
                                f"({group['correct']}/{group['problems']} correct)"))
    return bar_chart("plot-levels", bars, "x", baseline=1.0, width=max(300, 120 * len(bars)))


def compile_plot(results: list[dict[str, Any]]) -> str:
    timed = sorted((r for r in results if r.get("compiled") and r.get("compile_s")),
                   key=lambda r: r["compile_s"])
    bars = [Bar(r["name"], r["compile_s"], level_color(int(r.get("level") or 0)),
                f"{r['name']}: compile {r['compile_s']:.3g} s") for r in timed]
    return bar_chart("plot-compile", bars, "s")


def summary_table(summary: dict[str, Any]) -> str:
    with_compile = summary["overall"]["fast_compile"] is not None
    head = ["level", "problems", "loaded", "compiled", "correct"]
    head += [f"fast<sub>{p:g}</sub>" for p in FAST_P]
    if with_compile:
        head += [f"fast<sub>{p:g}</sub> vs compile" for p in FAST_P]
    head += ["geomean vs eager"] + (["geomean vs compile"] if with_compile else [])
    head += ["median compile s"]
    rows = []
    groups = [(f"level {k}", v) for k, v in summary["levels"].items()]
    for label, group in [*groups, ("overall", summary["overall"])]:
        cells = [esc(label)] + [str(group[k]) for k in ("problems", "loaded", "compiled",
                                                        "correct")]
        cells += [f"{100 * group['fast_eager'][str(p)]:.0f}%" for p in FAST_P]
        if with_compile:
            fast_c = group["fast_compile"] or {}
            cells += [f"{100 * fast_c[str(p)]:.0f}%" if str(p) in fast_c else "-"
                      for p in FAST_P]
        cells.append(num(group["geomean_speedup_eager"], ".2f", "x"))
        if with_compile:
            cells.append(num(group["geomean_speedup_compile"], ".2f", "x"))
        cells.append(num(group["median_compile_s"], ".2f"))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<table id="summary"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def problems_table(results: list[dict[str, Any]]) -> str:
    head = ["problem", "level", "status", "error", "dtype", "compile s", "time ms",
            "eager ms", "speedup eager", "compile ms", "speedup compile", "plan mem",
            "torch mem", "flags"]
    rows = []
    for r in results:
        status = status_of(r)
        error = str(r.get("error") or "")
        short = error if len(error) <= 300 else error[:297] + "..."
        cells = [
            f'<td class="name">{esc(r.get("name"))}</td>',
            f"<td>{esc(r.get('level'))}</td>",
            f'<td class="status">{status}</td>',
            f'<td class="error" title="{esc(error)}">{esc(short)}</td>',
            f"<td>{esc(r.get('dtype'))}</td>",
            f"<td>{num(r.get('compile_s'), '.3g')}</td>",
            f"<td>{num(r.get('time_ms'), '.4g')}</td>",
            f"<td>{num(r.get('ref_eager_ms'), '.4g')}</td>",
            f"<td>{num(r.get('speedup_eager'), '.3g', 'x')}</td>",
            f"<td>{num(r.get('ref_compile_ms'), '.4g')}</td>",
            f"<td>{num(r.get('speedup_compile'), '.3g', 'x')}</td>",
            f"<td>{mib(r.get('plan_bytes'))}</td>",
            f"<td>{mib(r.get('torch_peak_bytes'))}</td>",
            f'<td class="flag">{esc("; ".join(r.get("flags") or []))}</td>',
        ]
        rows.append(f'<tr class="{status}">' + "".join(cells) + "</tr>")
    return ('<table id="problems"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def render(run: dict[str, Any], summary: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """The whole page as a string."""
    meta = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in run.items())
    flagged = "".join(f"<li>{esc(f['name'])}: {f['speedup']:.1f}x vs {esc(f['against'])}</li>"
                      for f in summary["flagged_for_review"])
    figures = [
        ("fig-speedup", "Speedup per correct problem vs PyTorch eager (log scale; dashed: 1x)",
         speedup_plot(results, "eager")),
    ]
    if any(r.get("speedup_compile") for r in results):
        figures.append(("fig-speedup-compile", "Speedup per correct problem vs torch.compile",
                        speedup_plot(results, "compile")))
    figures += [
        ("fig-levels", "Geometric-mean speedup per level (correct problems)", level_plot(summary)),
        ("fig-compile", "Compile time per problem (seconds, log scale)", compile_plot(results)),
    ]
    body = [
        "<h1>kernelwright bench</h1>",
        f'<dl class="meta">{meta}</dl>',
        "<h2>Summary</h2>",
        summary_table(summary),
        ("<p>fast<sub>p</sub>: share of all problems that are correct and more than p times "
        "faster than the reference (fast<sub>0</sub>: share correct). Geometric means are "
        "over correct problems.</p>"),
    ]
    if flagged:
        body.append('<h2 class="flag">Flagged for review (speedup over 10x)</h2>'
                    f"<ul>{flagged}</ul>")
    body.append("<h2>Plots</h2>")
    for fig_id, caption, svg in figures:
        body.append(f'<figure id="{fig_id}"><figcaption>{esc(caption)}</figcaption>{svg}</figure>')
    body += ["<h2>Problems</h2>", problems_table(results),
             "<p>dtype: the problem's dtype as run (<code>--dtype</code> casts the model and "
             "its float inputs). plan mem: the device memory our compiled plan allocates "
             "(weights, inputs, outputs, intermediates); torch mem: "
             "torch.cuda.max_memory_allocated over a call of the reference, its model and "
             "inputs on the GPU (- without CUDA).</p>"]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            "<title>kernelwright bench report</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(body) + "</body></html>\n")


def write_report(path: Path, run: dict[str, Any], summary: dict[str, Any],
                 results: list[dict[str, Any]]) -> None:
    path.write_text(render(run, summary, results), encoding="utf-8")
