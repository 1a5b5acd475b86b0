"""The report of ``kernelwright bench --train`` (harness/training.py): one self-contained
HTML page (inline CSS and SVG, as report.py's) with the run's settings, a table of every
workload (parity, step times, compile time, memory) and, per workload, both loss curves
(ours and PyTorch eager's) over the steps; and the table as text for the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import STYLE, esc, mib, num

OURS, THEIRS = "#2563eb", "#dc2626"


def loss_plot(ours: list[float], theirs: list[float], width: int = 460,
              height: int = 220) -> str:
    """Both loss curves over the steps as inline SVG (ours solid, PyTorch's dashed)."""
    values = [v for v in ours + theirs if v == v and abs(v) != float("inf")]
    if not values:
        return '<p class="empty">no losses to plot</p>'
    left, right, top, bottom = 55, 10, 10, 30
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    steps = max(len(ours), len(theirs), 2)

    def x(i: int) -> float:
        return left + (width - left - right) * i / (steps - 1)

    def y(v: float) -> float:
        return top + (height - top - bottom) * (hi - v) / (hi - lo)

    def line(vals: list[float], color: str, dash: str, label: str) -> str:
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals)
                       if v == v and abs(v) != float("inf"))
        return (f'<polyline class="{label}" points="{pts}" fill="none" stroke="{color}" '
                f'stroke-width="1.5"{dash}><title>{label}</title></polyline>')

    ticks = "".join(
        f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
        f'stroke="#e5e7eb"/><text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">'
        f"{v:.4g}</text>" for v in (lo, (lo + hi) / 2, hi))
    axis = (f'<text x="{left}" y="{height - 8}">step 0</text>'
            f'<text x="{width - right}" y="{height - 8}" text-anchor="end">'
            f"step {steps - 1}</text>")
    legend = (f'<text x="{width - right - 150}" y="{top + 12}" fill="{OURS}">— kernelwright</text>'
              f'<text x="{width - right - 150}" y="{top + 26}" fill="{THEIRS}">'
              "- - PyTorch eager</text>")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'role="img">{ticks}{axis}'
            + line(theirs, THEIRS, ' stroke-dasharray="5,3"', "torch")
            + line(ours, OURS, "", "kernelwright") + legend + "</svg>")


COLUMNS = ("workload", "status", "loss rel", "norm0 rel", "compile s", "step ms",
           "eager ms", "x eager", "compile ms", "x compile", "plan mem", "torch mem")


def _row(r: dict[str, Any]) -> list[str]:
    return [r["name"], r["status"], num(r.get("loss_max_rel"), ".1e"),
            num(r.get("grad_norm0_rel"), ".1e"), num(r.get("compile_s"), ".1f"),
            num(r.get("time_ms"), ".3g"), num(r.get("ref_eager_ms"), ".3g"),
            num(r.get("speedup_eager"), ".2f"), num(r.get("ref_compile_ms"), ".3g"),
            num(r.get("speedup_compile"), ".2f"), mib(r.get("plan_bytes")),
            mib(r.get("torch_peak_bytes"))]


def format_table(results: list[dict[str, Any]]) -> str:
    """The workloads' table as aligned text."""
    rows = [list(COLUMNS)] + [_row(r) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    notes = [f"{r['name']}: {r['error']}" for r in results if r.get("error")]
    return "\n".join(lines + notes)


def render(run: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """The whole page as a string."""
    meta = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in run.items())
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS) + "<th>note</th>"
    rows = []
    for r in results:
        cells = _row(r)
        note = r.get("error") or r.get("compile_ref_note") or r.get("memory_note") or ""
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
    body = ["<h1>kernelwright bench --train</h1>", f'<dl class="meta">{meta}</dl>',
            "<h2>Workloads</h2>",
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>",
            "<p>loss rel: the largest relative difference of the loss over the steps; norm0 "
            "rel: of the gradient norm at step 0; step ms: one compiled training step; "
            "eager ms / compile ms: PyTorch's eager step and torch.compile of it; plan mem: "
            "the bytes our plan allocates; torch mem: torch.cuda.max_memory_allocated.</p>",
            "<h2>Loss curves</h2>", *curves]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            "<title>kernelwright bench --train report</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(body) + "</body></html>\n")


def write_report(path: Path, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
    path.write_text(render(run, results), encoding="utf-8")
