"""A recipe resolved once: the file read, its inputs lock applied, its inputs root fixed.

`invoke study` used to re-derive these at each step (load, lock, root, then the lock path and
root again inside the plan and the preflight). `resolve_recipe` does it once, up front; the
plan, the preflight, input verification and the runner take the `ResolvedRecipe` as given and
never read the recipe file or the inputs lock again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..evidence.recipe import Recipe, inputs_root, load_recipe, lock_path
from .preparation import locked_recipe

__all__ = ["ResolvedRecipe", "resolve_recipe"]


@dataclass(frozen=True)
class ResolvedRecipe:
    """A recipe and everything derived from its file once: what the later steps of a study take as given."""

    path: Path  # the recipe file as given
    declared: Recipe  # as written: hashes left to preparation still read "unpinned"
    recipe: Recipe  # what runs: the inputs lock applied (every hash pinned, locked tree files declared)
    root: Path  # absolute directory every input path is relative to (an --inputs-root override applied)
    lock_path: Path | None  # where `invoke prepare` writes this recipe's inputs lock; None without preparation
    locked: bool  # the inputs lock was applied (a study); False: the recipe as declared (plan, verify-inputs)


def resolve_recipe(path: str | Path, *, inputs_root_override: str | Path | None = None,
                   apply_lock: bool = True) -> ResolvedRecipe:
    """Load and validate the recipe; with `apply_lock`, fill its unpinned hashes from the inputs lock.

    A recipe with a `preparation` section and no lock (or a stale one) is a RecipeError naming
    `invoke prepare`, when the lock is applied. Nothing else is read.
    """
    path = Path(path)
    declared = load_recipe(path)
    prepared = declared.preparation is not None
    recipe = locked_recipe(declared, path) if apply_lock and prepared else declared
    return ResolvedRecipe(path=path, declared=declared, recipe=recipe,
                          root=inputs_root(path, recipe, inputs_root_override),
                          lock_path=lock_path(declared, path) if prepared else None, locked=apply_lock and prepared)
