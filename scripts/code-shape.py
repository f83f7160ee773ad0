#!/usr/bin/env python3
"""The shape figures of docs/design.md for a package tree, per package and in total.

    python scripts/code-shape.py [openjev_repro]

What is counted, and how, is tests/code_shape.py (the module tests/test_complexity.py holds to the
targets): string-key reads and single-use functions, each per 1,000 physical lines.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from code_shape import Figures, measure, total


def _line(name: str, f: Figures) -> str:
    return (f"{name:<16}{f.lines:>8}{f.string_keys:>7}{f.string_keys_per_kloc:>7.1f}"
            f"{f.functions:>7}{f.single_use:>8}{f.single_use_per_kloc:>7.1f}")


def main(argv: list[str]) -> int:
    package = Path(next((a for a in argv if not a.startswith("--")), "openjev_repro"))
    per = measure(package)
    print(f"{'package':<16}{'lines':>8}{'keys':>7}{'/kloc':>7}{'funcs':>7}{'single':>8}{'/kloc':>7}")
    for group, figures in sorted(per.items(), key=lambda kv: -kv[1].string_keys):
        print(_line(group, figures))
    print(_line("total", total(per)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
