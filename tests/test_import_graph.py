"""The one-direction rule of docs/design.md, held over the real import graph.

Every module of the package is parsed (ast, so function-level and TYPE_CHECKING imports count
too) and each import of another openjev_repro module must point at its own package or one to
its left in PACKAGES, the order docs/design.md draws: at package level the graph has no cycle.
A new package fails until it is placed in the order. No module imports itself in a circle
either, inside a package included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "openjev_repro"
DESIGN = PACKAGE.parent / "docs" / "design.md"

# Left to right: a module may import modules of its own package and of the packages before it,
# never of one after it. The top-level modules of openjev_repro (errors.py, limits.py, ...) and its
# own __init__ are the foundations; every other entry is a package and covers its submodules.
PACKAGES: list[str] = [
    "foundations", "evidence", "images", "host", "runtime", "study", "results", "manifest", "audit",
    "bench", "cluster", "orchestrator", "backend", "upstream", "cli",
]
FOUNDATIONS = "foundations"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def package_of(module: str) -> str:
    """The entry of PACKAGES that `module` belongs to (foundations for openjev_repro's own modules)."""
    parts = module.split(".")
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return FOUNDATIONS


def imports_of(module: str, path: Path) -> set[str]:
    """The openjev_repro modules `module` imports, resolved to module names (not attributes)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {name for name in found if name == "openjev_repro" or name.startswith("openjev_repro.")}


def violations() -> list[str]:
    out = []
    for module, path in MODULES.items():
        own = package_of(module)
        for target in sorted(imports_of(module, path)):
            theirs = package_of(target)
            if theirs in PACKAGES and own in PACKAGES and PACKAGES.index(theirs) > PACKAGES.index(own):
                out.append(f"{module} ({own}) imports {target} ({theirs}), a package to its right")
    return out


def module_cycles() -> list[list[str]]:
    """Every set of modules that import each other in a circle (Tarjan's strongly connected components)."""
    graph = {module: sorted(t for t in imports_of(module, path) if t in MODULES and t != module)
             for module, path in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return cycles


def test_every_package_has_a_place():
    assert sorted({package_of(m) for m in MODULES}) == sorted(PACKAGES)


def test_imports_point_only_left():
    assert violations() == []


def test_no_module_imports_itself_in_a_circle():
    """Inside a package too: e.g. host/driver.py never imports the drivers that implement it."""
    assert module_cycles() == []


def test_the_cycle_finder_sees_a_circle(monkeypatch):
    """The checker itself: a module of a lower package importing an upper one, and a circle, are found."""
    probe = {"openjev_repro.host.driver": "from .nvml import NvmlDriver\n",
             "openjev_repro.evidence.rows": "from ..results.statistics import summarize\n"}
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: next(
        (text for module, text in probe.items() if MODULES[module] == self), None) or real(self, *a, **k))
    assert ["openjev_repro.host.driver", "openjev_repro.host.nvml"] in module_cycles()
    assert any(v.startswith("openjev_repro.evidence.rows (evidence) imports openjev_repro.results.statistics")
               for v in violations())


def test_the_resolver_sees_every_kind_of_import(tmp_path):
    """The checker itself: relative, absolute, submodule and function-level imports all resolve."""
    source = tmp_path / "probe.py"
    source.write_text("from ..results.statistics import summarize\nimport openjev_repro.cli\n"
                      "from . import passes\n\ndef later():\n    from ..audit import verify\n")
    found = imports_of("openjev_repro.study.probe", source)
    assert found == {"openjev_repro.results.statistics", "openjev_repro.cli", "openjev_repro.study.passes",
                     "openjev_repro.audit.verify"}


def test_design_md_draws_the_same_order():
    """docs/design.md lists the packages in the order this test enforces."""
    text = DESIGN.read_text()
    listed = re.findall(r"^\d+\. \*\*([\w ]+)\*\*", text, re.MULTILINE)
    assert listed == PACKAGES


def test_test_doubles_live_outside_the_package():
    defined = [f"{m}.{node.name}" for m, path in MODULES.items()
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)
               and node.name.startswith(("Fake", "Mock", "Stub"))]
    assert defined == []
