"""Names that say one thing each (issue 37 item 5), held over the package's source.

Two modules of openjev_repro/ with one file name (two `plan.py`, two `load.py`) or two public
top-level classes with one name (two `Verdict`s) make a reader, a grep and a traceback ambiguous.
Both are found here with ast, without importing anything. cli/ is left out of the module check: a
`cli/<task>.py` is named after the package or task it exposes (docs/design.md says so), and
`__init__.py`/`__main__.py` are Python's names. Classes whose name starts with `_` are private to
their module and may repeat.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "openjev_repro"
PYTHON_NAMES = {"__init__.py", "__main__.py"}


def module_name_clashes(package: Path) -> dict[str, list[str]]:
    """File names borne by more than one module under `package` outside cli/, and their paths."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package)
        if path.name in PYTHON_NAMES or where.parts[0] == "cli":
            continue
        by_name[path.name].append(where.as_posix())
    return {name: paths for name, paths in by_name.items() if len(paths) > 1}


def class_name_clashes(package: Path) -> dict[str, list[str]]:
    """Public top-level class names defined in more than one module under `package`."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                by_name[node.name].append(path.relative_to(package).as_posix())
    return {name: paths for name, paths in by_name.items() if len(paths) > 1}


def _lines(clashes: dict[str, list[str]]) -> str:
    return "\n".join(f"  {name}: {', '.join(paths)}" for name, paths in sorted(clashes.items()))


def test_no_two_modules_share_a_file_name() -> None:
    clashes = module_name_clashes(PACKAGE)
    assert not clashes, "modules sharing a file name:\n" + _lines(clashes)


def test_no_two_public_classes_share_a_name() -> None:
    clashes = class_name_clashes(PACKAGE)
    assert not clashes, "public classes sharing a name:\n" + _lines(clashes)


def test_the_checks_see_a_planted_clash_and_pass_over_what_they_allow(tmp_path: Path) -> None:
    """A tree with one clash of each kind, beside the names the rule allows to repeat."""
    files = {
        "study/plan.py": "class Plan:\n    pass\n\nclass _Private:\n    pass\n",
        "evidence/plan.py": "class Plan:\n    pass\n\nclass _Private:\n    pass\n",
        "cli/study.py": "def task() -> None:\n    class Local:\n        pass\n",
        "study/__init__.py": "",
        "evidence/__init__.py": "",
        "cli/__init__.py": "",
        "study/study.py": "def helper() -> None:\n    class Local:\n        pass\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert module_name_clashes(tmp_path) == {"plan.py": ["evidence/plan.py", "study/plan.py"]}
    assert class_name_clashes(tmp_path) == {"Plan": ["evidence/plan.py", "study/plan.py"]}
