"""The trace gates in summary.json (issue 43): `kernel_time_reduction` and `graph_replay`.

Each gate decides itself from the run's kernel-family file (evidence/trace_recipe.py) and summarize
turns its outcome into a gate row; this module tells summarize what to read (`trace_inputs`), so the
study and `verify` decide the trace gates from the same file (which verify recomputes from the traces).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evidence.kernel_families import read_kernel_families

__all__ = ["TRACE_GATE_KINDS", "trace_inputs"]

TRACE_GATE_KINDS = ("kernel_time_reduction", "graph_replay")


def trace_inputs(run_dir: Path) -> dict[str, Any]:
    """summarize's keyword for a run with a kernel-family file; nothing for any other run."""
    table = read_kernel_families(run_dir)
    return {} if table is None else {"kernel_families": table}
