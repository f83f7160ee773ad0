"""The report's "GPU state and energy" section, from summary.json's `energy` and `gpu_state`."""

from __future__ import annotations

from msgspec import UnsetType

from ..evidence.summary import CounterSteps, Energy, GpuState, Summary

__all__ = ["energy_lines"]


def _n(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _energy_table(energy: Energy) -> list[str]:
    """One row per measured pass of each backend, then its overall row."""
    out = ["| Workload | Backend | Pass | Requests | J | J / decision | Above idle J / decision | Mean W |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    workloads = {} if isinstance(energy.workloads, UnsetType) else energy.workloads
    for wl, backends in workloads.items():
        for backend, b in backends.items():
            out += [(f"| {wl} | {backend} | {p.label.rsplit('/', 1)[-1]} | {p.requests} | {_n(p.joules)} | "
                     f"{_n(p.joules_per_decision, 3)} | {_n(p.above_idle_joules_per_decision, 3)} | "
                     f"{_n(p.mean_power_w, 1)} |") for p in b.passes]
            out.append(f"| {wl} | {backend} | **overall** | {b.requests} | {_n(b.joules)} | "
                       f"**{_n(b.joules_per_decision, 3)}** | {_n(b.above_idle_joules_per_decision, 3)} | "
                       f"idle {_n(b.idle_power_w, 1)} |")
    return out


def _state_table(state: GpuState) -> list[str]:
    out = ["| Pass | Readings | SM MHz min/median/max | Mem MHz | Max °C | Mean / max W | Clock-event reasons |",
           "| --- | ---: | --- | --- | ---: | --- | --- |"]
    idle = [] if isinstance(state.idle, UnsetType) else state.idle
    passes = [] if isinstance(state.passes, UnsetType) else state.passes
    for p in [*idle, *passes]:
        sm = "n/a" if p.sm_clock_mhz is None else f"{p.sm_clock_mhz.min}/{p.sm_clock_mhz.median}/{p.sm_clock_mhz.max}"
        mem = "n/a" if p.mem_clock_mhz is None else f"{p.mem_clock_mhz.min}-{p.mem_clock_mhz.max}"
        power = "n/a" if p.power_w is None else f"{_n(p.power_w.mean, 1)} / {_n(p.power_w.max, 1)}"
        reasons = ", ".join(p.clock_event_reasons) or "none"
        out.append(f"| {p.label} | {p.readings} | {sm} | {mem} | {_n(p.temperature_c_max, 0)} | "
                   f"{power} | {'**SLOWDOWN** ' if p.slowdown else ''}{reasons} |")
    return out


def energy_lines(summary: Summary) -> list[str]:
    """Lines of the section; none for runs from before gpu.jsonl (their reports render unchanged)."""
    energy, state = summary.energy, summary.gpu_state
    if isinstance(energy, UnsetType) or isinstance(state, UnsetType):
        return []
    out = ["## GPU state and energy", ""]
    if not energy.available:
        return [*out, f"Energy and GPU state unavailable: {energy.reason}.", ""]
    counter = energy.counter
    granularity = (f" Counter steps seen: smallest {counter.smallest_step_mj} mJ, median "
                   f"{counter.median_ms_between_changes} ms between changes ({counter.note})."
                   if isinstance(counter, CounterSteps) else " No counter steps were seen.")
    driver = None if isinstance(energy.driver, UnsetType) else energy.driver
    period = None if isinstance(energy.sample_period_s, UnsetType) else energy.sample_period_s
    reasons = [] if isinstance(state.slowdown_reasons, UnsetType) else state.slowdown_reasons
    return [*out, (f"Energy method: {energy.method}. {energy.idle_method}.{granularity} "
                   f"Driver {driver}, sampled every {period} s."), "", *_energy_table(energy), "",
            f"GPU state per pass (slowdown = {', '.join(reasons)}):", "", *_state_table(state), ""]
