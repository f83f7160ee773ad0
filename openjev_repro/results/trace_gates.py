"""The trace gates in summary.json (issue 43): `kernel_time_reduction` and `graph_replay`.

Each gate decides itself from the run's kernel-family file (evidence/trace_recipe.py); this module
turns its outcome into a gate row and tells summarize what to read (`trace_inputs`), so the study
and `verify` decide the trace gates from the same file (which verify recomputes from the traces).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evidence.kernel_families import KernelFamilyFile, read_kernel_families
from ..evidence.summary import GateResult
from ..evidence.trace_recipe import GraphReplayGate, KernelTimeReductionGate

__all__ = ["TRACE_GATE_KINDS", "trace_gate", "trace_inputs"]

TRACE_GATE_KINDS = ("kernel_time_reduction", "graph_replay")


def trace_gate(gate: KernelTimeReductionGate | GraphReplayGate, table: KernelFamilyFile | None) -> GateResult:
    evaluated, passed, detail = gate.decide(table)
    return GateResult(name=gate.name, kind=gate.kind, evaluated=evaluated, passed=passed, errors=0, detail=detail)


def trace_inputs(run_dir: Path) -> dict[str, Any]:
    """summarize's keyword for a run with a kernel-family file; nothing for any other run."""
    table = read_kernel_families(run_dir)
    return {} if table is None else {"kernel_families": table}
