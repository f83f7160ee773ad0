"""Input verification: every declared file's SHA256, before any backend starts."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from ..errors import InputMismatch
from ..evidence.recipe import Recipe
from ..hashing import hash_files

__all__ = ["PROGRESS_THRESHOLD_BYTES", "InputCheck", "checks_table", "require_all_ok", "verify_inputs"]

# Below this many bytes a progress bar only flickers.
PROGRESS_THRESHOLD_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class InputCheck:
    path: str  # relative to the inputs root
    role: str
    expected: str | None  # None for undeclared files
    actual: str | None  # None for missing files
    size: int | None

    @property
    def status(self) -> str:
        if self.expected is None:
            return "undeclared"
        if self.actual is None:
            return "missing"
        return "ok" if self.actual == self.expected else "changed"

    def to_dict(self) -> dict:
        return dict(asdict(self), status=self.status)


def _declared(recipe: Recipe) -> list[tuple[str, str, str]]:
    files = [(f.path, f.sha256, f.role) for f in recipe.inputs.files]
    for backend in recipe.backends:
        files += [(a.path, a.sha256, f"artifact of {backend.name}") for a in backend.artifacts]
    return files


def _undeclared(recipe: Recipe, root: Path, declared: set[str]) -> list[str]:
    """Every entry of a scanned folder that is not a directory (regular file, FIFO, socket, device,
    link: never followed) and not declared."""
    found: list[str] = []
    for folder in recipe.inputs.scan:
        base = root / folder
        if base.is_dir():
            for parent, dirs, files in os.walk(base, followlinks=False):
                links = [d for d in dirs if (Path(parent) / d).is_symlink()]  # walked as entries, not entered
                found += [(Path(parent) / n).relative_to(root).as_posix() for n in files + links]
    return [p for p in sorted(found) if p not in declared]


def verify_inputs(recipe: Recipe, root: Path, *, console: Console | None = None) -> list[InputCheck]:
    """Hash every declared input (in parallel, each byte read once) and list undeclared files."""
    declared = _declared(recipe)
    present = [(p, s, r) for p, s, r in declared if (root / p).is_file()]
    sizes = {p: (root / p).stat().st_size for p, _, _ in present}
    total = sum(sizes.values())
    paths = [root / p for p, _, _ in present]
    if console is not None and total >= PROGRESS_THRESHOLD_BYTES:
        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), console=console, transient=True) as bar:
            task = bar.add_task("hashing inputs", total=total)
            digests = hash_files(paths, progress=lambda n: bar.advance(task, n))
    else:
        digests = hash_files(paths)
    checks = []
    for path, sha, role in declared:
        actual = digests.get(root / path)
        checks.append(InputCheck(path, role, sha, actual, sizes.get(path)))
    names = {p for p, _, _ in declared}
    for extra in _undeclared(recipe, root, names):
        checks.append(InputCheck(extra, "undeclared", None, None, (root / extra).lstat().st_size))
    return checks


def require_all_ok(checks: list[InputCheck], root: Path, fix: str = "restore them") -> None:
    """InputMismatch in one short line: how many, the first three, and `fix` (how to recreate them)."""
    bad = [c for c in checks if c.status != "ok"]
    if bad:
        listed = ", ".join(f"{c.path} {c.status}" for c in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise InputMismatch(f"{len(bad)} input(s) under {root} do not match the recipe ({listed}{more}); "
                            f"no backend was started; {fix}.")


def _distinct_prefix(expected: str, actual: str, least: int = 12) -> int:
    """How many digits show two digests apart: `least`, or up to the first that differs and 4 more."""
    first = next((i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b), None)
    return max(least, first + 4) if first is not None else max(len(expected), len(actual))


def checks_table(checks: list[InputCheck], root: Path) -> Table:
    table = Table(title=f"Inputs under {root}")
    for column in ("status", "path", "role", "size", "sha256 (expected → actual)"):
        table.add_column(column, overflow="fold")  # a path is never cut short
    colours = {"ok": "green", "missing": "red", "changed": "red", "undeclared": "yellow"}
    for c in checks:
        digest = (c.expected or "-")[:12]
        if c.status != "ok":
            shown = _distinct_prefix(c.expected or "-", c.actual or "-")
            digest = f"{(c.expected or '-')[:shown]} → {(c.actual or '-')[:shown]}"
        size = "-" if c.size is None else f"{c.size:,}"
        table.add_row(f"[{colours[c.status]}]{c.status}[/]", c.path, c.role, size, digest)
    return table
