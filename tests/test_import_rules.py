"""Package import direction (DEVELOPERS.md) and no import cycles, checked on the source itself.

Every `import` / `from ... import` in the project packages is read with `ast` (function-level
lazy imports included: a lazy import in the wrong direction is still a dependency). The direction
has no exceptions: the `rag eval` command lives in `eval/cli.py` and plugs into the CLI through an
entry point, so `rag` never imports `eval`. No two files may import each other, even lazily or
for type checking only (such a loop is one design split in two files, e.g. the engine and remote
generators that borrowed each other's methods). Then every module is imported, which catches a
broken module that only shows on import.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("inference", "indexing", "retrieval", "rerank", "rag", "eval")
# Which project packages each package may import (besides itself).
ALLOWED = {
    "inference": set(),
    "indexing": set(),
    "retrieval": {"indexing"},
    "rerank": {"retrieval", "indexing", "inference"},
    "rag": {"indexing", "retrieval", "rerank", "inference"},
    "eval": {"indexing", "retrieval", "rerank", "inference", "rag"},
}


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module, at module level) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path)
    pkg_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    top_level = {id(n) for n in tree.body}
    for node in tree.body:  # imports under `if TYPE_CHECKING:` never run: not module-level edges
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            top_level.difference_update(id(n) for n in node.body)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import mod` imports the submodule: name it, or `from . import prompt` would
            # be an edge to the package's own __init__ (no edge) and hide a loop through it. A name
            # that is no module is trimmed back to its module by `_import_graph`.
            out += [(f"{mod}.{a.name}" if mod and a.name != "*" else mod, id(node) in top_level)
                    for a in node.names]
    return out


def test_package_import_direction():
    bad = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        own = rel.split("/")[0]
        for mod, _ in _imports(path):
            top = mod.split(".")[0]
            if top in PACKAGES and top != own and top not in ALLOWED[own]:
                bad.append(f"{rel} imports {mod}")
    assert not bad, "imports against the package direction:\n" + "\n".join(bad)


def _import_graph(module_level_only: bool) -> dict[str, set[str]]:
    """module -> project modules it imports (a package's own `__init__` is no edge)."""
    names = {_module_name(p): p for p in _modules()}
    graph: dict[str, set[str]] = {n: set() for n in names}
    for n, p in names.items():
        for mod, top_level in _imports(p):
            if module_level_only and not top_level:
                continue
            while mod and mod not in names:  # `from pkg.mod import name` -> pkg.mod
                mod = mod.rpartition(".")[0]
            if mod and mod != n and not n.startswith(mod + "."):  # a package's own __init__ is no edge
                graph[n].add(mod)
    return graph


def _first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (cyc := visit(m)):
                return cyc
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (cyc := visit(n)):
            return cyc
    return None


def test_no_module_level_import_cycle():
    """Module-level edges: such a cycle can deadlock or half-initialise an import."""
    if cyc := _first_cycle(_import_graph(module_level_only=True)):
        pytest.fail("import cycle: " + " -> ".join(cyc))


def test_no_file_level_import_cycle():
    """Every edge, lazy and TYPE_CHECKING imports included: Python can import such a loop, but the
    two files are one concern split in two (it hid `rag.generator` <-> `rag.remote_generator` and
    `inference.scheduler` <-> `inference.prompt_logprobs`)."""
    if cyc := _first_cycle(_import_graph(module_level_only=False)):
        pytest.fail("file-level import cycle: " + " -> ".join(cyc))


def test_from_package_import_submodule_is_an_edge():
    """Catches `from . import prompt` (and `from pkg import submodule`) resolved to the package's
    `__init__`: the edge was dropped as "a package's own __init__", so a loop through such an
    import went unseen. `rag/pipeline.py` imports `rag/prompt.py` that way."""
    graph = _import_graph(module_level_only=True)
    assert "rag.prompt" in graph["rag.pipeline"]
    assert "rag.answer" in graph["rag.pipeline"] and "rag.answer.Answer" not in graph["rag.pipeline"]


def test_a_file_level_cycle_is_found():
    """The cycle finder itself, on a lazy loop the module-level test must not see."""
    assert _first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _first_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_every_module_imports():
    failed = []
    for name in sorted(_module_name(p) for p in _modules()):
        if name.endswith("__main__"):
            continue  # runs the CLI
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 (report every broken module at once)
            failed.append(f"{name}: {type(e).__name__}: {e}")
    assert not failed, "\n".join(failed)
