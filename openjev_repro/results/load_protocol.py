"""Whether a load run's rows are the levels its recipe declares: a pure check for `verify`.

A workload with a `load` runs each level, in the recipe's order, with the protocol's
feasibility and measured passes (`Recipe.passes_per_level`); pass indexes run on across levels,
so level k's passes follow level k-1's. Every timed row of such a workload names a declared
level; every row of an open-loop level carries its scheduled send time, and no row of a
closed-loop level does. A workload without a load has no level in any row. `verify` reports
each problem found here, so a key holder who drops a level, moves a pass to another level, or
strips the schedules (which would hide coordinated omission) and re-signs is caught.
"""

from __future__ import annotations

import numpy as np

from ..evidence.recipe import Recipe, Workload
from .load import LevelColumns
from .row_table import RowTable

__all__ = ["level_problems"]

_TIMED = ("feasibility", "measured")


def _level_passes(cols: LevelColumns, timed: np.ndarray, workload: Workload, backend: str,
                  recipe: Recipe) -> list[str]:
    t, problems = cols.t, []
    of_backend = timed[t.workload.equals(workload.name)[timed] & t.backend.equals(backend)[timed]]
    for number, level in enumerate(workload.levels() or []):
        rows = of_backend[cols.level.equals(level.id)[of_backend]]
        for phase in _TIMED:
            have = sorted(set(t.pass_index[rows[t.phase.equals(phase)[rows]]].tolist()))
            per_level = recipe.passes_per_level(workload)[_TIMED.index(phase)]  # level k's follow level k-1's
            want = list(range(number * per_level + 1, (number + 1) * per_level + 1))
            if have != want:
                problems.append(f"{workload.name}/{backend} level {level.id}: {phase} passes {have or 'none'}, "
                                f"the recipe declares {want or 'none'}")
    return problems


def _schedules(cols: LevelColumns, rows: np.ndarray, workload: Workload) -> list[str]:
    """Open-loop rows carry a schedule, closed-loop rows none."""
    problems = []
    for level in workload.levels() or []:
        of_level = rows[cols.level.equals(level.id)[rows]]
        wrong = of_level[cols.has_schedule[of_level] != (level.kind == "open")]
        if len(wrong):
            what = "lack a scheduled send time" if level.kind == "open" else "carry a scheduled send time"
            problems.append(f"{workload.name} level {level.id}: {len(wrong)} timed rows {what}")
    return problems


def _levels_named(cols: LevelColumns, rows: np.ndarray, workload: Workload) -> list[str]:
    """Every timed row of the workload names one of its declared levels (none without a load)."""
    declared = {level.id for level in workload.levels() or []}
    named = [cols.level.values[c] for c in np.unique(cols.level.codes[rows]).tolist()]
    stray = sorted(str(v) for v in named if v not in declared and not (v is None and not declared))
    if not stray:
        return []
    where = f"declared: {', '.join(sorted(declared))}" if declared else "the workload declares no load"
    return [f"{workload.name}: timed rows of level(s) {', '.join(stray)} ({where})"]


def level_problems(t: RowTable, recipe: Recipe) -> list[str]:
    """Every way the rows differ from the recipe's load levels; [] when they match."""
    cols = LevelColumns.of(t)
    timed = np.flatnonzero(t.phase.equals("feasibility") | t.phase.equals("measured"))
    problems = []
    for workload in recipe.workloads:
        rows = timed[t.workload.equals(workload.name)[timed]]
        problems += _levels_named(cols, rows, workload)
        if workload.load is None:
            continue
        problems += _schedules(cols, rows, workload)
        for backend in recipe.backends:
            problems += _level_passes(cols, timed, workload, backend.name, recipe)
    return problems
