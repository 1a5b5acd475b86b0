"""The report of ``kernelwright bench --train`` (harness/training.py): one self-contained
HTML page (inline CSS and SVG, as report.py's) with the run's settings, a table of every
workload (parity, the float64 control, step times, compile time, memory) and, per
workload, both loss curves (ours and PyTorch eager's) over the steps beside each run's
relative distance from PyTorch float64 (the control); and the table as text."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .report import STYLE, esc, mib, num

OURS, THEIRS = "#2563eb", "#dc2626"


def _finite(v: float) -> bool:
    return v == v and abs(v) != float("inf")


def curves_plot(curves: list[tuple[list[float], str, str, str, str]], log: bool = False,
                width: int = 460, height: int = 220) -> str:
    """Curves over the steps as inline SVG; each curve (values, color, dash, class,
    legend), a dashed one with ``dash`` "5,3"; `log`: a logarithmic value axis, where
    values <= 0 (no difference at all) are left out."""
    def shown(v: float) -> bool:
        return _finite(v) and (v > 0 or not log)

    values = [v for vals, *_ in curves for v in vals if shown(v)]
    if not values:
        return '<p class="empty">nothing to plot</p>'
    scale = math.log10 if log else float
    left, right, top, bottom = 55, 10, 10, 30
    lo, hi = scale(min(values)), scale(max(values))
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    steps = max(max(len(vals) for vals, *_ in curves), 2)

    def x(i: int) -> float:
        return left + (width - left - right) * i / (steps - 1)

    def y(v: float) -> float:
        return top + (height - top - bottom) * (hi - v) / (hi - lo)

    lines, legend = [], []
    for k, (vals, color, dash, cls, label) in enumerate(curves):
        pts = " ".join(f"{x(i):.1f},{y(scale(v)):.1f}" for i, v in enumerate(vals) if shown(v))
        style = f' stroke-dasharray="{dash}"' if dash else ""
        lines.append(f'<polyline class="{cls}" points="{pts}" fill="none" stroke="{color}" '
                     f'stroke-width="1.5"{style}><title>{esc(label)}</title></polyline>')
        mark = "- -" if dash else "—"
        legend.append(f'<text x="{width - right - 150}" y="{top + 12 + 14 * k}" '
                      f'fill="{color}">{mark} {esc(label)}</text>')
    ticks = "".join(
        f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
        f'stroke="#e5e7eb"/><text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">'
        f"{10 ** v if log else v:.4g}</text>" for v in (lo, (lo + hi) / 2, hi))
    axis = (f'<text x="{left}" y="{height - 8}">step 0</text>'
            f'<text x="{width - right}" y="{height - 8}" text-anchor="end">'
            f"step {steps - 1}</text>")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'role="img">{ticks}{axis}' + "".join(lines) + "".join(legend) + "</svg>")


def loss_plot(ours: list[float], theirs: list[float]) -> str:
    """Both loss curves over the steps (ours solid, PyTorch's dashed)."""
    return curves_plot([(theirs, THEIRS, "5,3", "torch", "PyTorch eager"),
                        (ours, OURS, "", "kernelwright", "kernelwright")])


def control_plot(rel_ours: list[float], rel_torch: list[float],
                 rel_nudged: list[float]) -> str:
    """The float64 control: each fp32 run's relative loss difference from PyTorch float64
    per step, on a logarithmic axis (ours solid, PyTorch fp32's dashed, PyTorch fp32 from
    weights nudged by an ulp dotted: the control's yardstick is the farther of those two)."""
    nudged = [(rel_nudged, THEIRS, "1,3", "nudged-f64", "PyTorch fp32, nudged")] \
        if rel_nudged else []
    return curves_plot([(rel_torch, THEIRS, "5,3", "torch-f64", "PyTorch fp32"), *nudged,
                        (rel_ours, OURS, "", "kernelwright-f64", "kernelwright")], log=True)


COLUMNS = ("workload", "status", "control", "loss rel", "x f64", "norm0 rel", "compile s",
           "step ms", "eager ms", "x eager", "compile ms", "x compile", "plan mem", "torch mem")


def _row(r: dict[str, Any]) -> list[str]:
    ratio = max((v for v in (r.get("control_loss_ratio"), r.get("control_param_ratio"))
                 if v is not None), default=None)
    return [r["name"], r["status"], r.get("control") or "-", num(r.get("loss_max_rel"), ".1e"),
            num(ratio, ".2g"),
            num(r.get("grad_norm0_rel"), ".1e"), num(r.get("compile_s"), ".1f"),
            num(r.get("time_ms"), ".3g"), num(r.get("ref_eager_ms"), ".3g"),
            num(r.get("speedup_eager"), ".2f"), num(r.get("ref_compile_ms"), ".3g"),
            num(r.get("speedup_compile"), ".2f"), mib(r.get("plan_bytes")),
            mib(r.get("torch_peak_bytes"))]


def format_table(results: list[dict[str, Any]]) -> str:
    """The workloads' table as aligned text."""
    rows = [list(COLUMNS)] + [_row(r) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    notes = [f"{r['name']}: {r['error']}" for r in results if r.get("error")]
    notes += [f"{r['name']} (control): {r['control_error']}" for r in results
              if r.get("control_error")]
    return "\n".join(lines + notes)


def render(run: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """The whole page as a string."""
    meta = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in run.items())
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS) + "<th>note</th>"
    rows = []
    for r in results:
        cells = _row(r)
        failures = [n for n in (r.get("error"), r.get("control_error") and
                                "control: " + r["control_error"]) if n]
        note = ("; ".join(failures) or r.get("compile_ref_note") or r.get("memory_note")
                or "")
        rows.append(f'<tr class="{esc(r["status"])}"><td class="name">{esc(cells[0])}</td>'
                    f'<td class="status">{esc(cells[1])}</td>'
                    + "".join(f"<td>{esc(c)}</td>" for c in cells[2:])
                    + f'<td class="error">{esc(note)}</td></tr>')
    curves = []
    for r in results:
        caption = (f"{r['name']}: loss per step, {r.get('size')} size, "
                   f"{r.get('parameters', '?')} parameters ({r['status']})")
        plot = loss_plot(r.get("loss_ours") or [], r.get("loss_torch") or [])
        curves.append(f'<figure id="loss-{esc(r["name"])}"><figcaption>{esc(caption)}'
                      f"</figcaption>{plot}</figure>")
        if r.get("loss_f64"):
            caption = (f"{r['name']}: relative loss difference from PyTorch float64 per step "
                       f"(control {r.get('control')})")
            plot = control_plot(r.get("rel_ours_f64") or [], r.get("rel_torch_f64") or [],
                                r.get("rel_nudged_f64") or [])
            curves.append(f'<figure id="control-{esc(r["name"])}"><figcaption>'
                          f"{esc(caption)}</figcaption>{plot}</figure>")
    body = ["<h1>kernelwright bench --train</h1>", f'<dl class="meta">{meta}</dl>',
            "<h2>Workloads</h2>",
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>",
            "<p>loss rel: the largest relative difference of the loss from PyTorch eager "
            "fp32's over the steps (the gate); control: PASS where ours is as close to PyTorch "
            "float64 as PyTorch fp32 is (the farther of its run and one from weights nudged by "
            "an ulp), within the factor above; x f64: how many times "
            "further ours is (the worst of the losses' and the parameters'); norm0 "
            "rel: of the gradient norm at step 0; step ms: one compiled training step; "
            "eager ms / compile ms: PyTorch's eager step and torch.compile of it; plan mem: "
            "the bytes our plan allocates; torch mem: torch.cuda.max_memory_allocated.</p>",
            "<h2>Loss curves and the float64 control</h2>", *curves]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            "<title>kernelwright bench --train report</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(body) + "</body></html>\n")


def write_report(path: Path, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
    path.write_text(render(run, results), encoding="utf-8")
