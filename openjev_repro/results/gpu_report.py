"""The report's "GPU state and energy" section, from summary.json's `energy` and `gpu_state`."""

from __future__ import annotations

from typing import Any

__all__ = ["energy_lines"]


def _n(value: Any, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _energy_table(energy: dict) -> list[str]:
    out = ["| Workload | Backend | Pass | Requests | J | J / decision | Above idle J / decision | Mean W |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for wl, backends in energy.get("workloads", {}).items():
        for backend, b in backends.items():
            for p in b["passes"]:
                out.append(f"| {wl} | {backend} | {p['label'].rsplit('/', 1)[-1]} | {p['requests']} | "
                           f"{_n(p['joules'])} | {_n(p['joules_per_decision'], 3)} | "
                           f"{_n(p['above_idle_joules_per_decision'], 3)} | {_n(p['mean_power_w'], 1)} |")
            out.append(f"| {wl} | {backend} | **overall** | {b['requests']} | {_n(b['joules'])} | "
                       f"**{_n(b['joules_per_decision'], 3)}** | {_n(b['above_idle_joules_per_decision'], 3)} | "
                       f"idle {_n(b['idle_power_w'], 1)} |")
    return out


def _state_table(state: dict) -> list[str]:
    out = ["| Pass | Readings | SM MHz min/median/max | Mem MHz | Max °C | Mean / max W | Clock-event reasons |",
           "| --- | ---: | --- | --- | ---: | --- | --- |"]
    for p in [*state.get("idle", []), *state.get("passes", [])]:
        sm, mem, power = p["sm_clock_mhz"], p["mem_clock_mhz"], p["power_w"]
        reasons = ", ".join(p["clock_event_reasons"]) or "none"
        out.append(f"| {p['label']} | {p['readings']} | "
                   + (f"{sm['min']}/{sm['median']}/{sm['max']}" if sm else "n/a") + " | "
                   + (f"{mem['min']}-{mem['max']}" if mem else "n/a") + f" | {_n(p['temperature_c_max'], 0)} | "
                   + (f"{_n(power['mean'], 1)} / {_n(power['max'], 1)}" if power else "n/a")
                   + f" | {'**SLOWDOWN** ' if p['slowdown'] else ''}{reasons} |")
    return out


def energy_lines(summary: Any) -> list[str]:
    """Lines of the section; none for runs from before gpu.jsonl (their reports render unchanged)."""
    energy, state = summary.get("energy"), summary.get("gpu_state")
    if not isinstance(energy, dict) or not isinstance(state, dict):
        return []
    out = ["## GPU state and energy", ""]
    if not energy.get("available"):
        return [*out, f"Energy and GPU state unavailable: {energy.get('reason')}.", ""]
    counter = energy.get("counter") or {}
    granularity = (f" Counter steps seen: smallest {counter['smallest_step_mj']} mJ, median "
                   f"{counter['median_ms_between_changes']} ms between changes ({counter['note']})."
                   if counter else " No counter steps were seen.")
    out += [(f"Energy method: {energy['method']}. {energy['idle_method']}.{granularity} "
             f"Driver {energy.get('driver')}, sampled every {energy.get('sample_period_s')} s."), ""]
    out += [*_energy_table(energy), ""]
    out += [f"GPU state per pass (slowdown = {', '.join(state['slowdown_reasons'])}):", "", *_state_table(state), ""]
    return out
