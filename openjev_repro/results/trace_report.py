"""The report's kernel-family section and plot (issue 43), from the run's kernel-families.json.

Per traced length, one table: each family's device time per traced request (the mean over that
backend's traces at that length, in ms) and its kernel count, per backend, and the change of each
backend against the first traced one; then the launches per request. `kernel_families.png` draws
the same means as bars, one panel per length. A run without kernel-families.json gets neither, so
the reports of earlier runs render as signed. docs/traces.md says how to read them.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

from ..evidence.kernel_families import KernelFamilyFile, TraceFamilies, read_kernel_families

__all__ = ["PLOT_NAME", "kernel_family_lines", "kernel_family_plot_bytes"]

PLOT_NAME = "kernel_families.png"


def _backends(table: KernelFamilyFile) -> list[str]:
    return list(dict.fromkeys(t.backend for t in table.traces))


def _lengths(table: KernelFamilyFile) -> list[int]:
    return sorted({t.tokens for t in table.traces})


def _mean(traces: Sequence[TraceFamilies], value) -> float:
    return math.fsum(value(t) for t in traces) / len(traces)


def _family_ms(traces: Sequence[TraceFamilies], family: str) -> float:
    return _mean(traces, lambda t: t.families[family].time_us if family in t.families else 0.0) / 1000


def _cell(traces: Sequence[TraceFamilies], family: str | None) -> str:
    if not traces:
        return "—"
    if family is None:
        return f"{_mean(traces, lambda t: t.time_us) / 1000:.3f} ({_mean(traces, lambda t: t.kernels):.0f})"
    kernels = _mean(traces, lambda t: t.families[family].kernels if family in t.families else 0)
    return f"{_family_ms(traces, family):.3f} ({kernels:.0f})"


def _change(base: Sequence[TraceFamilies], other: Sequence[TraceFamilies], family: str | None) -> str:
    if not base or not other:
        return "—"
    pick = (lambda ts: _mean(ts, lambda t: t.time_us) / 1000) if family is None else (lambda ts: _family_ms(ts, family))
    before, after = pick(base), pick(other)
    return "—" if before <= 0 else f"{(after - before) / before * 100:+.1f}%"


def _length_table(table: KernelFamilyFile, tokens: int, backends: list[str]) -> list[str]:
    at = {b: table.at(b, tokens) for b in backends}
    unit = "kernel" if all(t.device_events == "kernel" for t in table.traces) else "CPU op"
    head = ["family", *(f"{b} ms ({unit}s)" for b in backends), *(f"{b} vs {backends[0]}" for b in backends[1:])]
    out = [f"{tokens} tokens ({', '.join(f'{len(at[b])} traces of {b}' for b in backends)}):", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for family in [*table.families, None]:
        cells = [_cell(at[b], family) for b in backends] + [_change(at[backends[0]], at[b], family) for b in backends[1:]]
        out.append(f"| {family or f'all {unit}s'} | " + " | ".join(cells) + " |")
    launches = "; ".join(
        f"{b} {_mean(at[b], lambda t: t.graph_launches):g} / {_mean(at[b], lambda t: t.kernel_launches):g} / "
        f"{_mean(at[b], lambda t: t.captures):g}" for b in backends if at[b])
    return [*out, "", f"Per traced request, graph launches / kernel launches / graph captures: {launches}.", ""]


def kernel_family_lines(run_dir: Path) -> list[str]:
    """The report section's lines; none for a run without kernel-families.json."""
    table = read_kernel_families(run_dir)
    if table is None or not table.traces:
        return []
    backends = _backends(table)
    out = [("Device time per traced request by kernel family, in ms (mean over the traces at that length; "
            "kernel count in parentheses), from kernel-families.json, which `verify` recomputes from the "
            "trace files under traces/. Traced requests ran after the timed passes and were never timed; "
            "a family's time is not HTTP latency (docs/traces.md)."), ""]
    for tokens in _lengths(table):
        out += _length_table(table, tokens, backends)
    return [*out, f"Plot: {PLOT_NAME} (the same means, one panel per length)."]


def _time_word(table: KernelFamilyFile) -> str:
    return "device time" if all(t.device_events == "kernel" for t in table.traces) else "CPU op time"


def kernel_family_plot_bytes(run_dir: Path, study_id: str, *, enabled: bool = True) -> dict[str, bytes]:
    """{kernel_families.png: PNG bytes} for a run with kernel-families.json (PNG metadata stripped)."""
    table = read_kernel_families(run_dir) if enabled else None
    if table is None or not table.traces:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends, lengths, families = _backends(table), _lengths(table), list(table.families)
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.5 * len(lengths), 4.2), squeeze=False)
    width = 0.8 / max(1, len(backends))
    for ax, tokens in zip(axes[0], lengths, strict=True):
        drawn: list[float] = []
        for k, backend in enumerate(backends):
            traces = table.at(backend, tokens)
            values = [_family_ms(traces, f) if traces else 0.0 for f in families]
            drawn += values
            ax.bar([i + k * width for i in range(len(families))], values, width, label=backend)
        positive = [v for v in drawn if v > 0]
        log = bool(positive) and max(positive) > 30 * min(positive)  # small families stay readable
        if log:
            ax.set_yscale("log")
        ax.set_xticks([i + width * (len(backends) - 1) / 2 for i in range(len(families))], families,
                      rotation=45, ha="right")
        ax.set_title(f"{tokens} tokens")
        ax.set_ylabel(f"{_time_word(table)} per request (ms{', log scale' if log else ''})")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{study_id}: kernel families per traced request")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return {PLOT_NAME: buf.getvalue()}
