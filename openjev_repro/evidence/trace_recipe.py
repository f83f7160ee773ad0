"""What a recipe says about traces beyond where to take them: kernel families and trace gates.

A kernel family is a name and the regular expressions its kernels' names match (`re.search`,
case-sensitive); a kernel may belong to several families, and one in no family counts only in
the trace's totals. The two trace gates are decided from the kernel-family file
(evidence/kernel_families.py), which `verify` recomputes from the trace files:

    kernel_time_reduction  a family's mean device time per traced request at one length is at least
                           `min_percent` lower for `candidate` than for `baseline`
    graph_replay           every trace of `backend` (at `tokens`, default every traced length) has
                           exactly one graph launch, no kernel launch of its own and no graph capture

`Recipe` (evidence/recipe.py) holds these types; each gate checks its references against the
recipe (`check_recipe`) and decides itself from the kernel-family file (`decide`).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field

from ..schema import StrictModel

if TYPE_CHECKING:  # the gates read these; recipe.py imports this module, so nothing is imported at run time
    from .kernel_families import KernelFamilyFile, TraceFamilies

__all__ = ["FAMILY_NAME_RE", "PROFILERS", "Families", "GraphReplayGate", "KernelTimeReductionGate", "TraceOutcome"]

FAMILY_NAME_RE = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
PROFILERS = ("nsys", "torch")


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"kernel family pattern {pattern!r} is not a regular expression: {exc}") from None
    return pattern


Pattern = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(_compiles)]
Families = dict[Annotated[str, Field(pattern=FAMILY_NAME_RE)], Annotated[list[Pattern], Field(min_length=1, max_length=32)]]

# (evaluated, passed, detail): what the gate table of summary.json records for a trace gate.
TraceOutcome = tuple[bool, bool | None, str]


class _TraceGate(StrictModel):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
    description: str = ""


class KernelTimeReductionGate(_TraceGate):
    """candidate's mean device time in `family` per traced request at `tokens` is at least
    `min_percent` below baseline's (means over each backend's traces at that length)."""

    kind: Literal["kernel_time_reduction"]
    family: Annotated[str, Field(pattern=FAMILY_NAME_RE)]
    baseline: str
    candidate: str
    tokens: Annotated[int, Field(ge=1, le=1_000_000)]
    min_percent: Annotated[float, Field(allow_inf_nan=False, ge=-1000, le=100)]

    def check_recipe(self, traced: set[str], families: set[str], tokens: set[int]) -> None:
        if self.family not in families:
            raise ValueError(f"gate {self.name!r}: family {self.family!r} is not declared in traces.families")
        if self.tokens not in tokens:
            raise ValueError(f"gate {self.name!r}: {self.tokens} tokens is not a traced length (traces.tokens)")
        for backend in (self.baseline, self.candidate):
            if backend not in traced:
                raise ValueError(f"gate {self.name!r}: backend {backend!r} is not traced (traces.backends)")

    def decide(self, table: KernelFamilyFile | None) -> TraceOutcome:
        if table is None:
            return True, False, "the run has no kernel-family file (no traces were taken), so the gate cannot pass"
        base = table.at(self.baseline, self.tokens)
        cand = table.at(self.candidate, self.tokens)
        if not base or not cand:
            missing = [b for b, got in ((self.baseline, base), (self.candidate, cand)) if not got]
            return True, False, f"no trace of {', '.join(missing)} at {self.tokens} tokens"
        base_ms, cand_ms = _mean_ms(base, self.family), _mean_ms(cand, self.family)
        if base_ms <= 0:
            return True, False, f"{self.baseline} has no {self.family} kernel time at {self.tokens} tokens"
        percent = (base_ms - cand_ms) / base_ms * 100
        detail = (f"{self.family} at {self.tokens} tokens: {self.candidate} {cand_ms:.3f} ms is {percent:.2f}% below "
                  f"{self.baseline} {base_ms:.3f} ms (mean of {len(cand)} and {len(base)} traces; "
                  f"required >= {self.min_percent}%)")
        return True, percent >= self.min_percent, detail


class GraphReplayGate(_TraceGate):
    """Every trace of `backend` (at `tokens`; empty: every traced length) shows warm graph replay:
    exactly one graph launch, zero kernel launches outside it, zero graph captures."""

    kind: Literal["graph_replay"]
    backend: str
    tokens: list[Annotated[int, Field(ge=1, le=1_000_000)]] = Field(default_factory=list)

    def check_recipe(self, traced: set[str], families: set[str], tokens: set[int]) -> None:
        if self.backend not in traced:
            raise ValueError(f"gate {self.name!r}: backend {self.backend!r} is not traced (traces.backends)")
        unknown = sorted(set(self.tokens) - tokens)
        if unknown:
            raise ValueError(f"gate {self.name!r}: {unknown} tokens are not traced lengths (traces.tokens)")

    def decide(self, table: KernelFamilyFile | None) -> TraceOutcome:
        if table is None:
            return True, False, "the run has no kernel-family file (no traces were taken), so the gate cannot pass"
        traces = [t for t in table.traces if t.backend == self.backend and (not self.tokens or t.tokens in self.tokens)]
        if not traces:
            return True, False, f"no trace of {self.backend}{f' at {self.tokens} tokens' if self.tokens else ''}"
        bad = [f"{t.tokens} tok #{t.repeat}: {t.graph_launches} graph launches, {t.kernel_launches} kernel "
               f"launches, {t.captures} captures" for t in traces
               if (t.graph_launches, t.kernel_launches, t.captures) != (1, 0, 0)]
        kernels = sorted({t.kernels for t in traces})
        detail = (f"{len(traces) - len(bad)} of {len(traces)} traces of {self.backend} replay one graph with no kernel "
                  f"launch or capture of their own ({'/'.join(map(str, kernels))} kernels per request)")
        if bad:
            detail += "; not: " + "; ".join(bad[:4]) + (f" (and {len(bad) - 4} more)" if len(bad) > 4 else "")
        return True, not bad, detail


def _mean_ms(traces: list[TraceFamilies], family: str) -> float:
    return math.fsum(t.families[family].time_us for t in traces if family in t.families) / len(traces) / 1000
