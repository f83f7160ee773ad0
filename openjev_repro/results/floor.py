"""The hardware floor: the least time one GPU could take for a request, from figures the run measured.

For a request of T input tokens through a model of P non-embedding parameters stored in BF16:

    floor(T) = max(2 * P / copy_bandwidth,  2 * P * T / matmul_rate)

the time to read every weight once, or to do the weight matmuls of T tokens at the dense BF16
matmul rate, whichever is longer (attention, the recurrent state and elementwise work are left
out, so no implementation can reach it). The copy bandwidth and the matmul rate are the ones a
backend measured on the run's own GPU (`python -m openjev_repro.backend --measure-hardware`,
recorded in backends.json as `hardware`, read as `evidence.records.HardwareFigures`); P is what that backend reports as
`non_embedding_parameters`. A run whose backends measured nothing has no floor section.

`floor_lines` states, per backend, the measured mean, P50 and P95 (JevBench rank) over every
successful measured request, the same statistics of the per-request floors, and their ratios;
the same for 80-110-token requests; and, for backends with CUDA Graph replay, the capture cost
per new length (the latency of a length's first request, where the graph was captured, minus
the median measured latency of that length).
"""

from __future__ import annotations

import numpy as np

from ..evidence.records import BackendsRecord, HardwareFigures
from .row_table import RowTable
from .statistics import mean, median, p95_jevbench

__all__ = ["SHORT_TOKENS", "floor_lines", "floor_ms", "hardware_of"]

SHORT_TOKENS = (80, 110)  # the "80-110-token requests", inclusive
BYTES_PER_PARAMETER = 2   # BF16


def floor_ms(tokens: np.ndarray, parameters: int, copy_tbps: float, matmul_tflops: float) -> np.ndarray:
    """Per-request floor in ms for an array of input-token counts."""
    read = BYTES_PER_PARAMETER * parameters / (copy_tbps * 1e12) * 1e3
    compute = 2.0 * parameters * tokens.astype(np.float64) / (matmul_tflops * 1e12) * 1e3
    return np.maximum(read, compute)


def hardware_of(backends: BackendsRecord) -> tuple[str, HardwareFigures, int] | None:
    """(backend, its hardware figures, its parameter count) of the first backend (by name) that measured them."""
    for name, facts in sorted(backends.backends.items()):
        if facts.floor_figures is not None:
            return name, *facts.floor_figures
    return None


def _figures(values: np.ndarray) -> tuple[float | None, float | None, float | None]:
    listed = values.tolist()
    return mean(listed), median(listed), p95_jevbench(listed)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a is not None and b else "—"


def _ms(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "—"


def _capture_cost(t: RowTable, rows: np.ndarray, measured: np.ndarray) -> str:
    """Median over lengths of (first request of a length's latency - that length's median measured latency)."""
    order = rows[np.argsort(t.start_ns[rows], kind="stable")]
    first: dict[int, float] = {}
    for i in order:
        first.setdefault(int(t.input_tokens[i]), float(t.latency_ms[i]))
    costs = []
    for length, latency in first.items():
        same = measured[t.input_tokens[measured] == length]
        if len(same):
            costs.append(latency - float(np.median(t.latency_ms[same])))
    if not costs:
        return "—"
    return f"{median(costs):.1f} ms median over {len(costs)} lengths (max {max(costs):.1f} ms)"


def _header(source: str, hardware: HardwareFigures, parameters: int) -> list[str]:
    copy, rate = hardware.copy_tbps, hardware.matmul_bf16_tflops
    return [(f"Measured by {source} on {hardware.gpu} before serving: dense BF16 matmul "
             f"{rate:.1f} TFLOP/s, device copy {copy:.3f} TB/s (read + written); {parameters:,} non-embedding "
             f"parameters, so reading the weights once takes {2 * parameters / (copy * 1e12) * 1e3:.2f} ms. "
             "floor(T) = max(2·P / copy bandwidth, 2·P·T / matmul rate); ratios are measured / floor."), "",
            ("| backend | requests | mean ms | floor | ratio | P50 ms | floor | ratio | P95 ms | floor | ratio "
             f"| {SHORT_TOKENS[0]}–{SHORT_TOKENS[1]}-token mean ms | floor | ratio |"),
            "| --- |" + " ---: |" * 13]


def _row_cells(name: str, table: RowTable, idx: np.ndarray, hardware: HardwareFigures, parameters: int) -> str:
    """One backend's table row: measured figures, their floors and ratios, then the short requests'."""
    latency = table.latency_ms[idx]
    floors = floor_ms(table.input_tokens[idx], parameters, hardware.copy_tbps, hardware.matmul_bf16_tflops)
    short = (table.input_tokens[idx] >= SHORT_TOKENS[0]) & (table.input_tokens[idx] <= SHORT_TOKENS[1])
    cells = [name, str(len(idx))]
    for got, low in zip(_figures(latency), _figures(floors), strict=True):
        cells += [_ms(got), _ms(low), _ratio(got, low)]
    short_got, short_low = mean(latency[short].tolist()), mean(floors[short].tolist())
    cells += [_ms(short_got), _ms(short_low), _ratio(short_got, short_low)]
    return "| " + " | ".join(cells) + " |"


def floor_lines(backends: BackendsRecord, table: RowTable) -> list[str]:
    """Markdown lines of the hardware-floor section ([] when no backend measured the hardware)."""
    found = hardware_of(backends)
    if found is None:
        return []
    source, hardware, parameters = found
    lines = _header(source, hardware, parameters)
    ok_measured = table.phase.equals("measured") & table.ok & table.has_input_tokens
    captures = []
    for name in sorted({b for b in table.backend.strings() if b is not None}):
        mine = table.backend.equals(name)
        idx = np.flatnonzero(mine & ok_measured)
        if not len(idx):
            continue
        lines.append(_row_cells(name, table, idx, hardware, parameters))
        facts = backends.backends.get(name)
        if facts is not None and facts.cuda_graph_capacity:
            every = np.flatnonzero(mine & table.ok & table.has_input_tokens)
            captures.append(f"- {name}: capture cost per new length {_capture_cost(table, every, idx)}")
    if captures:
        lines += ["", *captures]
    return lines
