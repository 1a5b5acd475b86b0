"""report.html: self-contained, well formed, with the table and the plots; and as
Chromium renders it."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from bench_browser import dump_dom, needs_chromium

from kernelwright.harness import metrics, report

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source"}


class TagChecker(HTMLParser):
    """Collects tags and checks that every element opened is closed, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


def sample_results() -> list[dict]:
    results = []
    for i in range(12):
        correct = i % 4 != 3
        results.append({
            "name": f"level{1 + i % 3}/{i}_op<&>", "level": 1 + i % 3, "loaded": True,
            "compiled": i != 11, "correct": correct, "compile_s": 0.1 * (i + 1),
            "time_ms": 1.0, "ref_eager_ms": 0.5 * (i + 1),
            "speedup_eager": 0.5 * (i + 1) if correct else None,
            "speedup_compile": 0.4 * (i + 1) if correct else None,
            "error": None if correct else "mismatch: trial 2 (heavy): 3 of 64 <bad>",
            "reason": None if correct else "mismatch", "flags": [],
        })
    return results


def write_sample(path: Path) -> Path:
    results = sample_results()
    run = {"device": "llvmpipe (Vulkan, CPU)", "precision": "strict",
           "reference": "PyTorch eager on the CPU"}
    report.write_report(path, run, metrics.summarize(results), results)
    return path


def test_report_is_self_contained_and_well_formed(tmp_path: Path) -> None:
    text = write_sample(tmp_path / "report.html").read_text()
    checker = TagChecker()
    checker.feed(text)
    assert checker.errors == [] and checker.stack == []
    tags = [tag for tag, _ in checker.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text
    ids = {attrs.get("id") for _, attrs in checker.tags}
    assert {"summary", "problems", "plot-speedup-eager", "plot-speedup-compile",
            "plot-levels", "plot-compile"} <= ids
    assert tags.count("svg") == 4
    assert "level1/0_op&lt;&amp;&gt;" in text and "<bad>" not in text


def test_empty_results_still_make_a_page(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    report.write_report(path, {"device": "none"}, metrics.summarize([]), [])
    assert "nothing to plot" in path.read_text()


@needs_chromium
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    dom = dump_dom(write_sample(tmp_path / "report.html"))
    assert 'id="summary"' in dom and 'id="problems"' in dom
    for plot in ("plot-speedup-eager", "plot-levels", "plot-compile"):
        assert f'id="{plot}"' in dom
    assert dom.count('class="bar"') == 9 + 9 + 6 + 11  # speedups x2, levels, compile times
