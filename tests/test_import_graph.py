"""The one-direction rule of docs/design.md, held over the real import graph.

Every module of the package is parsed (ast, so function-level and TYPE_CHECKING imports count
too) and each import of another openjev_repro module must point at a layer at or to the left
of the importer's own layer in LAYERS, the order docs/design.md draws. A module that fits no
layer fails too, so a new module has to be placed in the order when it is added.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "openjev_repro"
DESIGN = PACKAGE.parent / "docs" / "design.md"

# Left to right: a module may import its own layer and those before it, never one after it.
# A layer names modules or packages (a package covers its submodules, except the root package,
# which stands for its own __init__ only); the longest name wins.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundations", ["openjev_repro", "openjev_repro.errors", "openjev_repro.limits", "openjev_repro.hashing",
                     "openjev_repro.decision", "openjev_repro.schema"]),
    ("images", ["openjev_repro.images"]),
    ("prompts", ["openjev_repro.backend.prompts"]),
    ("recipe", ["openjev_repro.evidence.recipe", "openjev_repro.study.placeholders"]),
    ("preparation", ["openjev_repro.study.preparation", "openjev_repro.study.traces"]),
    ("resolved", ["openjev_repro.study.resolved"]),
    ("plan", ["openjev_repro.study.plan"]),
    ("inputs", ["openjev_repro.study.inputs"]),
    ("workload", ["openjev_repro.study.workload", "openjev_repro.backend.synthetic"]),
    ("host", ["openjev_repro.host"]),
    ("runtime", ["openjev_repro.runtime"]),
    ("client", ["openjev_repro.study.timed_client", "openjev_repro.evidence.rows"]),
    ("passes", ["openjev_repro.study.passes"]),
    ("rundir", ["openjev_repro.evidence.rundir"]),
    ("row_table", ["openjev_repro.results", "openjev_repro.results.row_table"]),
    ("statistics", ["openjev_repro.evidence.summary", "openjev_repro.results.statistics"]),
    ("report", ["openjev_repro.results.floor", "openjev_repro.results.imported", "openjev_repro.results.report"]),
    ("manifest", ["openjev_repro.manifest"]),
    ("audit", ["openjev_repro.audit"]),
    ("cluster", ["openjev_repro.cluster"]),
    ("bench", ["openjev_repro.bench"]),
    ("preflight", ["openjev_repro.orchestrator.preflight"]),
    ("runner", ["openjev_repro.study", "openjev_repro.orchestrator.runner"]),
    ("backend", ["openjev_repro.backend"]),
    ("upstream", ["openjev_repro.upstream"]),
    ("cli", ["openjev_repro.cli"]),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matching name, layer index)
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            covers = module == name or (name != "openjev_repro" and module.startswith(name + "."))
            if covers and (best is None or len(name) > best[0]):
                best = (len(name), index)
    return None if best is None else best[1]


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
        own = layer_of(module)
        for target in sorted(imports_of(module, path)):
            theirs = layer_of(target)
            if theirs is not None and own is not None and theirs > own:
                out.append(f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[theirs][0]}), a layer to its right")
    return out


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []
    for name, members in LAYERS:
        for member in members:
            assert member in MODULES, f"layer {name} names {member}, which is not a module of the package"


def test_imports_point_only_left():
    assert violations() == []


def test_the_resolver_sees_every_kind_of_import(tmp_path):
    """The checker itself: relative, absolute, submodule and function-level imports all resolve."""
    source = tmp_path / "probe.py"
    source.write_text("from ..results.statistics import summarize\nimport openjev_repro.cli\n"
                      "from . import rows\n\ndef later():\n    from ..audit import verify\n")
    found = imports_of("openjev_repro.study.probe", source)
    assert found == {"openjev_repro.results.statistics", "openjev_repro.cli", "openjev_repro.evidence.rows",
                     "openjev_repro.audit.verify"}


def test_design_md_draws_the_same_order():
    """docs/design.md lists the layers in the order this test enforces."""
    text = DESIGN.read_text()
    listed = re.findall(r"^\d+\. \*\*([\w ]+)\*\*", text, re.MULTILINE)
    assert listed == [name for name, _ in LAYERS]


def test_test_doubles_live_outside_the_package():
    defined = [f"{m}.{node.name}" for m, path in MODULES.items()
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)
               and node.name.startswith(("Fake", "Mock", "Stub"))]
    assert defined == []
