#!/usr/bin/env python3
"""The shape figures of docs/design.md for a package tree, per package and in total.

    python scripts/code-shape.py [openjev_repro] [--files]

- string-key reads: every `.get("...")` call and every `x["..."]` subscript with a literal string
  key (load or store), counted from the syntax tree, per 1,000 physical lines;
- single-use functions: functions and methods whose name is referenced from exactly one place in
  the package (a name defined twice counts its references together), per 1,000 physical lines.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path


def string_key_reads(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)) or (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and isinstance(node.slice.value, str)):
            count += 1
    return count


def measure(package: Path) -> dict[str, dict[str, int]]:
    per: dict[str, dict[str, int]] = {}
    defined: list[tuple[str, str]] = []
    referenced: Counter[str] = Counter()
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rel = path.relative_to(package)
        group = rel.parts[0] if len(rel.parts) > 1 else "(top level)"
        figures = per.setdefault(group, Counter())
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
            per[group]["single_use"] += 1
    return per


def main(argv: list[str]) -> int:
    package = Path(next((a for a in argv if not a.startswith("--")), "openjev_repro"))
    per = measure(package)
    total: Counter[str] = Counter()
    print(f"{'package':<16}{'lines':>8}{'keys':>7}{'/kloc':>7}{'funcs':>7}{'single':>8}{'/kloc':>7}")
    for group, f in sorted(per.items(), key=lambda kv: -kv[1]["string_keys"]):
        total.update(f)
        kl = f["lines"] / 1000
        print(f"{group:<16}{f['lines']:>8}{f['string_keys']:>7}{f['string_keys'] / kl:>7.1f}"
              f"{f['functions']:>7}{f['single_use']:>8}{f['single_use'] / kl:>7.1f}")
    kl = total["lines"] / 1000
    print(f"{'total':<16}{total['lines']:>8}{total['string_keys']:>7}{total['string_keys'] / kl:>7.1f}"
          f"{total['functions']:>7}{total['single_use']:>8}{total['single_use'] / kl:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
