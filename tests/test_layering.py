"""The package's layers, read from the source (ast): who may import whom.

    core     idlib (the package), lazy, fields, fibers, variants (a package: one module per row),
             config, hf, attention, counting, certify, verdict, rank, fastrank, blockrank, symmetry,
             conservation, implementations (a package)
    report   idlib.report.*   (tables, plotting, parameters): may import the core
    studies  idlib.studies.*  (one chapter's machinery): may import the core and report
    cli      idlib.cli, idlib.__main__: may import anything

A module imports only its own layer and the layers below it; no import circle among idlib
modules (lazy imports count: a circle hidden inside a function is still a circle); imports of
idlib modules only at module level; inside functions only the optional dependencies; every
third-party package imported at module level is a dependency in pyproject.toml.

torch is the one exception to "import at module level", documented in idlib.lazy: no idlib
module imports it itself, each takes the stand-in ``from .lazy import torch``, which imports
torch on its first use, so that a count, the census and every refusal never pay the 1.5 s of
``import torch`` (tests/test_startup.py measures it).  The stand-in is an ordinary module-level
import of idlib.lazy here; torch itself is imported by idlib.lazy through importlib, not by an
import statement.
"""
from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "idlib"

CORE = {"lazy", "fields", "fibers", "variants", "config", "arguments", "model", "hf", "attention", "counting", "certify",
        "verdict", "rank", "fastrank", "blockrank", "symmetry", "conservation", "implementations"}
RANK = {"core": 0, "report": 1, "studies": 2, "cli": 3}
# imported only inside the functions that need them (the `[hf]` extra of pyproject.toml)
OPTIONAL = {"transformers", "huggingface_hub", "safetensors"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str | None:
    """The layer of an idlib module, None when it has none (a new module must be placed)."""
    parts = module.split(".")
    if module == "idlib" or (len(parts) >= 2 and parts[1] in CORE):
        return "core"
    if parts[1:2] in (["report"], ["studies"]):
        return parts[1]
    if module in ("idlib.cli", "idlib.__main__"):
        return "cli"
    return None


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported name, line, at module level) for every import statement of ``module``.

    Relative imports are made absolute; ``from X import y`` names the module X.y when that is
    an idlib module, else X. Module level: not inside a function or class body.
    """
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    package = module if _is_package(module) else module.rpartition(".")[0]
    out = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.ClassDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for a in child.names:
                    full = f"{base}.{a.name}"
                    out.append((full if full in MODULES else base, child.lineno, top))
            visit(child, inner)

    visit(tree, True)
    return out


def idlib_edges() -> dict[str, set[str]]:
    """module -> the idlib modules it imports (module level or not)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for name, _, _ in imports(m):
            target = name
            while target and target not in MODULES:          # idlib.x.attr -> idlib.x
                target = target.rpartition(".")[0]
            if target and name.split(".")[0] == "idlib" and target != m:
                graph[m].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_graph_is_read_from_the_source():
    """A sanity check of the parser on modules whose imports are known."""
    graph = idlib_edges()
    assert {"idlib.config", "idlib.attention", "idlib.counting", "idlib.rank"} <= graph["idlib"]
    assert "idlib.symmetry" in graph["idlib.conservation"]
    assert "idlib.conservation" in graph["idlib.studies.training"]
    assert graph["idlib.__main__"] == {"idlib.cli"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer(m) is None] == []
    assert {m for m in MODULES if layer(m) == "core"} == {"idlib"} | {
        m for m in MODULES if m.split(".")[1:2] and m.split(".")[1] in CORE}
    assert {"idlib.config", "idlib.symmetry", "idlib.conservation", "idlib.cli",
            "idlib.studies.training", "idlib.report.tables"} <= set(MODULES)


@pytest.mark.parametrize("lower", ["core", "report", "studies"])
def test_no_module_imports_a_layer_above_its_own(lower):
    """core imports only core; report core and report; studies no cli."""
    graph = idlib_edges()
    upward = sorted(f"{m} -> {t} ({layer(t)})" for m, targets in graph.items()
                    if layer(m) == lower for t in targets if RANK[layer(t)] > RANK[lower])
    assert upward == []


def test_no_import_circles():
    assert cycles(idlib_edges()) == []


def test_idlib_modules_are_imported_at_module_level_only():
    lazy = sorted(f"{m}:{line} imports {name}" for m in MODULES
                  for name, line, top in imports(m) if not top and name.split(".")[0] == "idlib")
    assert lazy == []


def _third_party(name: str) -> str | None:
    top = name.split(".")[0]
    if top in ("idlib", "__future__") or top in sys.stdlib_module_names:
        return None
    return top


def test_inside_functions_only_the_optional_dependencies_are_imported():
    lazy = sorted(f"{m}:{line} imports {name}" for m in MODULES for name, line, top in imports(m)
                  if not top and _third_party(name) not in (None, *OPTIONAL))
    assert lazy == []


def test_torch_is_imported_by_no_module_itself():
    """Every module takes torch from idlib.lazy (module docstring); `import torch` anywhere in
    idlib, at module level or inside a function, would bring the 1.5 s back to every command."""
    direct = sorted(f"{m}:{line} imports {name}" for m in MODULES for name, line, _ in imports(m)
                    if name.split(".")[0] == "torch")
    assert direct == []
    users = {m for m in MODULES if any(isinstance(n, ast.Name) and n.id == "torch"
                                       for n in ast.walk(ast.parse(MODULES[m].read_text())))}
    takers = {m for m in MODULES for name, _, top in imports(m) if name == "idlib.lazy.torch" or
              (name == "idlib.lazy" and top)}
    assert "idlib.attention" in users and users - {"idlib.lazy"} <= takers


def _requirement_name(spec: str) -> str:
    for sep in "[=<>!~; ":
        spec = spec.split(sep)[0]
    return spec.strip().lower().replace("-", "_")


def test_module_level_third_party_imports_are_declared_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_requirement_name(s) for s in project["dependencies"]}
    optional = {_requirement_name(s) for specs in project.get("optional-dependencies", {}).values()
                for s in specs}
    used = {(_third_party(name), top) for m in MODULES for name, _, top in imports(m)}
    assert sorted(p for p, top in used if p and top and p not in declared) == []
    assert sorted(p for p, top in used if p and not top and p not in declared | optional) == []
    assert OPTIONAL & {p for p, top in used if p and top} == set()
