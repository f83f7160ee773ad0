"""The shape figures of docs/design.md, measured from the syntax tree (scripts/code-shape.py prints
them per package; tests/test_complexity.py holds them to their targets).

- string-key reads: every `.get("...")` call and every `x["..."]` subscript with a literal string
  key (load or store), per 1,000 physical lines;
- single-use functions: functions and methods whose name is referenced from exactly one place in
  the package (a name defined twice counts its references together), per 1,000 physical lines.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "openjev_repro"


def _is_string_key_read(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return (isinstance(node.func, ast.Attribute) and node.func.attr == "get" and bool(node.args)
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)


def string_key_reads(tree: ast.AST) -> int:
    return sum(1 for node in ast.walk(tree) if _is_string_key_read(node))


@dataclass(frozen=True)
class Figures:
    """One package's (or the whole tree's) counts."""

    lines: int
    string_keys: int
    functions: int
    single_use: int

    def per_kloc(self, count: int) -> float:
        return count / self.lines * 1000 if self.lines else 0.0

    @property
    def string_keys_per_kloc(self) -> float:
        return self.per_kloc(self.string_keys)

    @property
    def single_use_per_kloc(self) -> float:
        return self.per_kloc(self.single_use)

    def __add__(self, other: Figures) -> Figures:
        return Figures(lines=self.lines + other.lines, string_keys=self.string_keys + other.string_keys,
                       functions=self.functions + other.functions, single_use=self.single_use + other.single_use)


@cache
def measure(package: Path = PACKAGE) -> dict[str, Figures]:
    """Figures per top-level package of `package` ("(top level)" for its own modules); measured once
    per process (the tests ask twice)."""
    counts: dict[str, Counter[str]] = {}
    defined: list[tuple[str, str]] = []
    referenced: Counter[str] = Counter()
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rel = path.relative_to(package)
        group = rel.parts[0] if len(rel.parts) > 1 else "(top level)"
        figures = counts.setdefault(group, Counter())
        figures["lines"] += len(text.splitlines())
        figures["string_keys"] += string_key_reads(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("__"):
                defined.append((group, node.name))
                figures["functions"] += 1
            elif isinstance(node, ast.Name):
                referenced[node.id] += 1
            elif isinstance(node, ast.Attribute):
                referenced[node.attr] += 1
    for group, name in defined:
        if referenced[name] == 1:
            counts[group]["single_use"] += 1
    return {group: Figures(lines=c["lines"], string_keys=c["string_keys"], functions=c["functions"],
                           single_use=c["single_use"]) for group, c in counts.items()}


def total(per_package: dict[str, Figures]) -> Figures:
    return sum(per_package.values(), Figures(lines=0, string_keys=0, functions=0, single_use=0))
