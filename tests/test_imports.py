"""The package's import graph: no cycle, and no project module imported inside a function.

Every module of src/kernelwright (the bundled suite's problem files aside: they are
inputs, not the package's code) is parsed with `ast`. An edge A -> B is an import of
B made at A's module level; importing B also runs B's parent packages' __init__, so
those are edges too (except A's own ancestors, which Python has begun importing first).
A function may import only third-party modules (optional, heavy ones).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kernelwright"
# Modules left out of both checks, each with why (none is).
ALLOWED: set[str] = set()


def _modules(package: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[1:2] == ["suite"]:
            continue
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.AST, module: str, is_package: bool, modules) -> list[str]:
    """The project modules an import statement imports (the deepest that exists)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = _absolute(module, is_package, node)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                 for alias in node.names]
    found = []
    for name in names:
        if name != "kernelwright" and not name.startswith("kernelwright."):
            continue
        while name not in modules:
            name = name.rsplit(".", 1)[0]
        found.append(name)
    return found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _graph(package: Path = PACKAGE) -> tuple[dict[str, set[str]], list[str]]:
    """The module-level import edges, and every function-level project import."""
    modules = _modules(package)
    edges: dict[str, set[str]] = {name: set() for name in modules}
    in_functions: list[str] = []
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), str(path))

        def visit(node: ast.AST, function: str | None, module=module, is_package=is_package):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, getattr(child, "name", "<lambda>"))
                elif isinstance(child, (ast.Import, ast.ImportFrom)):
                    targets = sorted(set(_targets(child, module, is_package, modules)))
                    if targets and function is not None:
                        in_functions.append(f"{module}:{child.lineno} ({function}) imports "
                                            + ", ".join(targets))
                    for target in targets if function is None else ():
                        edges[module].update([target, *(p for p in _parents(target)
                                                        if not module.startswith(p + "."))])
                else:
                    visit(child, function)

        visit(tree, None)
        edges[module].discard(module)
    return edges, in_functions


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def test_the_graph_sees_the_package() -> None:
    edges, _ = _graph()
    assert {"kernelwright.compiler", "kernelwright.lower.registry",
            "kernelwright.harness.command"} <= set(edges)
    assert "kernelwright.lower.registry" in edges["kernelwright.lower.elementwise"]
    assert "kernelwright.lower" not in edges["kernelwright.lower.elementwise"]  # an ancestor
    assert "kernelwright.cli" in edges["kernelwright.harness.command"]  # cli.options' parent


def test_a_knot_is_found(tmp_path: Path) -> None:
    package = tmp_path / "kernelwright"
    (package / "sub").mkdir(parents=True)
    for name, text in {"__init__.py": "", "a.py": "from .sub import b\n",
                       "sub/__init__.py": "from . import b\n",
                       "sub/b.py": "import os\n\n\ndef f():\n    from .. import a\n"
                                   "    import json\n"}.items():
        (package / name).write_text(text)
    edges, in_functions = _graph(package)
    assert edges["kernelwright.a"] == {"kernelwright.sub", "kernelwright.sub.b"}
    assert edges["kernelwright.sub"] == {"kernelwright.sub.b"}
    assert in_functions == ["kernelwright.sub.b:5 (f) imports kernelwright.a"]


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    edges, _ = _graph()
    cycles = [c for c in _cycles(edges) if not set(c) & ALLOWED]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_project_import_inside_a_function() -> None:
    _, in_functions = _graph()
    hidden = [line for line in in_functions if line.split(":")[0] not in ALLOWED]
    assert not hidden, "project imports inside functions:\n" + "\n".join(hidden)
