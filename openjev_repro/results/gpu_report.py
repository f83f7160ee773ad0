"""The report's "GPU state and energy" section, from summary.json's `energy` and `gpu_state`."""

from __future__ import annotations

from msgspec import UnsetType

from ..evidence.summary import BackendEnergy, ClockRange, CounterSteps, Energy, GpuState, PassState, PowerRange, Summary

__all__ = ["energy_lines"]


def _n(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _energy_rows(workload: str, backend: str, b: BackendEnergy) -> list[str]:
    """One row per measured pass of a backend, then its overall row."""
    out = [(f"| {workload} | {backend} | {p.label.rsplit('/', 1)[-1]} | {p.requests} | {_n(p.joules)} | "
            f"{_n(p.joules_per_decision, 3)} | {_n(p.above_idle_joules_per_decision, 3)} | {_n(p.mean_power_w, 1)} |")
           for p in b.passes]
    return [*out, (f"| {workload} | {backend} | **overall** | {b.requests} | {_n(b.joules)} | "
                   f"**{_n(b.joules_per_decision, 3)}** | {_n(b.above_idle_joules_per_decision, 3)} | "
                   f"idle {_n(b.idle_power_w, 1)} |")]


def _energy_table(energy: Energy) -> list[str]:
    out = ["| Workload | Backend | Pass | Requests | J | J / decision | Above idle J / decision | Mean W |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    workloads = {} if isinstance(energy.workloads, UnsetType) else energy.workloads
    for wl, backends in workloads.items():
        for backend, b in backends.items():
            out += _energy_rows(wl, backend, b)
    return out


def _clocks(sm: ClockRange | None) -> str:
    return "n/a" if sm is None else f"{sm.min}/{sm.median}/{sm.max}"


def _power(power: PowerRange | None) -> str:
    return "n/a" if power is None else f"{_n(power.mean, 1)} / {_n(power.max, 1)}"


def _state_row(p: PassState) -> str:
    mem = "n/a" if p.mem_clock_mhz is None else f"{p.mem_clock_mhz.min}-{p.mem_clock_mhz.max}"
    reasons = ", ".join(p.clock_event_reasons) or "none"
    return (f"| {p.label} | {p.readings} | {_clocks(p.sm_clock_mhz)} | {mem} | {_n(p.temperature_c_max, 0)} | "
            f"{_power(p.power_w)} | {'**SLOWDOWN** ' if p.slowdown else ''}{reasons} |")


def _state_table(state: GpuState) -> list[str]:
    out = ["| Pass | Readings | SM MHz min/median/max | Mem MHz | Max °C | Mean / max W | Clock-event reasons |",
           "| --- | ---: | --- | --- | ---: | --- | --- |"]
    idle = [] if isinstance(state.idle, UnsetType) else state.idle
    passes = [] if isinstance(state.passes, UnsetType) else state.passes
    return out + [_state_row(p) for p in [*idle, *passes]]


def _method(energy: Energy) -> str:
    counter = energy.counter
    granularity = (f" Counter steps seen: smallest {counter.smallest_step_mj} mJ, median "
                   f"{counter.median_ms_between_changes} ms between changes ({counter.note})."
                   if isinstance(counter, CounterSteps) else " No counter steps were seen.")
    driver = None if isinstance(energy.driver, UnsetType) else energy.driver
    period = None if isinstance(energy.sample_period_s, UnsetType) else energy.sample_period_s
    return (f"Energy method: {energy.method}. {energy.idle_method}.{granularity} "
            f"Driver {driver}, sampled every {period} s.")


def energy_lines(summary: Summary) -> list[str]:
    """Lines of the section; none for runs from before gpu.jsonl (their reports render unchanged)."""
    energy, state = summary.energy, summary.gpu_state
    if isinstance(energy, UnsetType) or isinstance(state, UnsetType):
        return []
    out = ["## GPU state and energy", ""]
    if not energy.available:
        return [*out, f"Energy and GPU state unavailable: {energy.reason}.", ""]
    reasons = [] if isinstance(state.slowdown_reasons, UnsetType) else state.slowdown_reasons
    return [*out, _method(energy), "", *_energy_table(energy), "",
            f"GPU state per pass (slowdown = {', '.join(reasons)}):", "", *_state_table(state), ""]
