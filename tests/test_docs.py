"""The docs name files that exist, and docs/ARCHITECTURE.md stays short enough to read.

Checked in README.md, docs/*.md and the READMEs under baselines/ (whose backticked file
names are relative to their folder): every relative link target; every path under the
repository's own folders (`tools/`, `baselines/`, `src/kernelwright/`, `tests/`,
`examples/`, `docs/`); every path under a stage folder of the package (`lower/linalg.py`
is src/kernelwright/lower/linalg.py); and every bare `name.py` / `name.wgsl`, which must
be the name of some file in the repository. Globs (`kernels/*.wgsl`) must match a file.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "kernelwright"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "baselines").rglob("README.md"))]
ARCHITECTURE_MAX_LINES = 320

ROOT_FOLDERS = ("tools", "baselines", "src/kernelwright", "tests", "examples", "docs")
PACKAGE_FOLDERS = ("frontend", "ir", "lower", "schedule", "kernels", "codegen", "runtime",
                   "train", "harness", "check", "cli", "tune", "optimize", "suite")

# a path-like token: letters, digits and ._-*/[] (globs), not preceded by a character
# that makes it part of something else (a URL, ~/..., $OUT/..., REV^:path, a.b/c)
_TOKEN = re.compile(r"(?<![\w./~$:^-])([\w*\[\]-][\w.*\[\]/-]*)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_SPAN = re.compile(r"`([\w.-]+(?:/[\w.-]+)*(?:\.(?:json|txt|sqlite|md)|/))`")


def _defines(source: Path, name: str) -> bool:
    """Whether the Python file `source` defines or imports `name` at any level."""
    n = re.escape(name)
    return re.search(rf"^\s*(def|class|async def)\s+{n}\b|^\s*{n}\b[^=\n(]*=(?!=)"
                     rf"|^\s*from\s+\S+\s+import\s+[^#\n]*\b{n}\b|^\s+{n},",
                     source.read_text(), re.MULTILINE) is not None


def _exists(path: Path) -> bool:
    """Whether `path` names a file or folder: a glob at least one, a module without its
    `.py` its file, `module.name` (lower/conv.implicit_gemm) a file defining that name."""
    text = str(path)
    if any(c in text for c in "*[]"):
        return any(ROOT.glob(str(path.relative_to(ROOT))))
    if path.exists() or path.with_name(path.name + ".py").exists():
        return True
    module, _, name = path.name.partition(".")
    source = path.with_name(module + ".py")
    return bool(name) and source.is_file() and _defines(source, name)


def dotted_name_exists(dotted: str) -> bool:
    """Whether `folder.module.name` (or `folder.name`, `module.name`) names something the
    package defines: the module, or a name defined in it (in any module of a folder)."""
    here, parts = PACKAGE, dotted.split(".")
    while parts and (here / parts[0]).is_dir():
        here = here / parts.pop(0)
    if parts and (here / f"{parts[0]}.py").is_file():
        here = here / f"{parts.pop(0)}.py"
    if not parts:
        return True
    files = [here] if here.is_file() else sorted(here.rglob("*.py"))
    return any(_defines(f, parts[0]) for f in files)


def _all_file_names() -> set[str]:
    names: set[str] = set()
    for folder in ("src", "tests", "tools", "examples", "docs", "baselines"):
        names.update(p.name for p in (ROOT / folder).rglob("*") if p.is_file())
    names.update(p.name for p in ROOT.iterdir() if p.is_file())
    return names


MODULES = ("compiler", "plan", "dtypes", "options", "generate", "progress")
_DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGE_FOLDERS + MODULES)})(?:\.\w+)+)")


def referenced_names(text: str) -> list[str]:
    """The dotted names of the package that `text` mentions (`harness.timing.warm_up`),
    file names (`plan.py`) left out."""
    return list(dict.fromkeys(
        t for t in _DOTTED.findall(text)
        if not re.search(r"\.(py|wgsl|md|json|sh|txt|toml|sqlite)$", t)))


def referenced_paths(text: str, doc: Path) -> list[tuple[str, Path | None]]:
    """(as written, where it must exist) for each path `text` names; None: a bare file
    name, which must be the name of some file in the repository."""
    found: list[tuple[str, Path | None]] = []
    for target in _LINK.findall(text):
        if "://" in target or target.startswith("#"):
            continue
        found.append((target, (doc.parent / target.split("#")[0]).resolve()))
    if doc.parent != ROOT and ROOT / "baselines" in (doc.parent, *doc.parent.parents):
        # a result folder's README names its files relative to itself, in backticks
        for token in _SPAN.findall(text):
            found.append((token, doc.parent / token.rstrip("/")))
    for token in _TOKEN.findall(text):
        token = token.strip("*").rstrip(".-")
        if token.startswith(tuple(f + "/" for f in ROOT_FOLDERS)):
            found.append((token, ROOT / token.rstrip("/")))
        elif "/" in token and token.split("/")[0] in PACKAGE_FOLDERS:
            found.append((token, PACKAGE / token.rstrip("/")))
        elif "/" in token and re.search(r"\.(py|wgsl)$", token):  # under the root or package
            found.append((token, ROOT / token if (ROOT / token).exists() else PACKAGE / token))
        elif "/" not in token and re.search(r"\.(py|wgsl)$", token):
            found.append((token, None))
    return list(dict.fromkeys(found))


def test_paths_are_found_in_text():
    """The extraction itself: it finds each kind of path and skips the others."""
    text = ("See [the docs](docs/PERF.md), `tools/kernels.py --suite`, lower/linalg.py, "
            "baselines/suite_h200_full/ and templates.py; not ~/.cache/kw/tune.sqlite, "
            "$OUT/kernels.json, REV^:bench/results/x.json or http://h/tools/x.py.")
    found = [t for t, _ in referenced_paths(text, ROOT / "README.md")]
    assert found == ["docs/PERF.md", "tools/kernels.py", "lower/linalg.py",
                     "baselines/suite_h200_full/", "templates.py"]
    assert referenced_names("`harness.timing.warm_up`, plan.py, `tune.tuning()`") == [
        "harness.timing.warm_up", "tune.tuning"]
    assert dotted_name_exists("harness.timing.warm_up") and dotted_name_exists("codegen.OPS")
    assert not dotted_name_exists("tune.tuning")
    assert _exists(PACKAGE / "lower/conv.implicit_gemm")
    assert not _exists(PACKAGE / "lower/linalg.no_such_name")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_exist(doc: Path):
    names = _all_file_names()
    missing = []
    for token, path in referenced_paths(doc.read_text(), doc):
        ok = (any(fnmatch.fnmatch(n, token) for n in names) if path is None
              else _exists(path))
        if not ok:
            missing.append(token)
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: " \
                        f"{sorted(set(missing))}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_python_names_exist(doc: Path):
    missing = [n for n in referenced_names(doc.read_text()) if not dotted_name_exists(n)]
    assert not missing, f"{doc.relative_to(ROOT)} names what the package does not define: " \
                        f"{missing}"


def test_architecture_is_short():
    lines = (ROOT / "docs" / "ARCHITECTURE.md").read_text().count("\n")
    assert lines <= ARCHITECTURE_MAX_LINES, f"docs/ARCHITECTURE.md has {lines} lines"


def test_every_baseline_is_listed():
    """baselines/ keeps only the result files its README lists (what docs/PERF.md cites)."""
    listed = (ROOT / "baselines" / "README.md").read_text()
    unlisted = [p.name for p in sorted((ROOT / "baselines").iterdir())
                if p.name != "README.md" and f"`{p.name}{'/' if p.is_dir() else ''}" not in listed]
    assert not unlisted, f"baselines/README.md does not list {unlisted}"
