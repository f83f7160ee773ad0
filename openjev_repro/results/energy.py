"""Energy per decision and GPU state per pass, from gpu.jsonl and the rows: pure functions, so
`verify` recomputes them exactly as the study computed them.

Energy of a measured pass: the driver's total-energy counter (NVML, millijoules) read just before
the pass's first request and just after its last response; divided by the pass's requests it
is joules per decision. Where the counter is absent (nvidia-smi, an older driver) the sampled
power is integrated over the pass (trapezoids between the readings), and the summary says so.
Energy above idle subtracts the backend's idle power times the pass's duration; idle power is
measured in a quiet window of its own (after readiness, model loaded, before the first inference).
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import Any

from ..errors import EvidenceError
from ..evidence.files import check_format
from ..host.driver import SLOWDOWN_REASONS, reason_names

__all__ = ["GPU_FILE", "energy_and_state", "read_gpu_events"]

GPU_FILE = "gpu.jsonl"
_KINDS = {"header", "sample", "begin", "end", "idle_begin", "idle_end", "error"}
_LABELLED = {"begin", "end", "idle_begin", "idle_end"}
_NUMBERS = ("t_ns", "sm_clock_mhz", "mem_clock_mhz", "clock_event_reasons", "temperature_c", "power_w", "energy_mj")
COUNTER_METHOD = ("NVML total-energy counter (mJ) read just before the pass's first request and just after its "
                  "last response; joules per decision = pass energy / pass requests")
INTEGRATED_METHOD = ("no energy counter: sampled power integrated over the pass (trapezoids between readings); "
                     "joules per decision = pass energy / pass requests")


def _bad_number(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    return not math.isfinite(value) or abs(value) > 1e18


def _check_event(number: int, event: Any) -> dict:
    if not isinstance(event, dict) or event.get("kind") not in _KINDS:
        raise EvidenceError(f"{GPU_FILE} line {number}: not a GPU state event")
    for key in _NUMBERS:
        if _bad_number(event.get(key)):
            raise EvidenceError(f"{GPU_FILE} line {number}: {key} is not a finite number")
    if "label" in event and not isinstance(event["label"], str):
        raise EvidenceError(f"{GPU_FILE} line {number}: label is not text")
    missing = _missing(event)
    if missing:
        raise EvidenceError(f"{GPU_FILE} line {number}: a {event['kind']} event without {missing}")
    return event


def _missing(event: dict) -> str | None:
    """What an event lacks that its readers read: a window's label, a reading's clock."""
    if event["kind"] in _LABELLED and "label" not in event:
        return "a label"
    if event["kind"] != "header" and not isinstance(event.get("t_ns"), int | float):
        return "t_ns"
    return None


def read_gpu_events(path: Path) -> list[dict]:
    """gpu.jsonl's events, header first; EvidenceError for anything else."""
    events = []
    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                try:
                    events.append(_check_event(number, json.loads(line)))
                except ValueError as exc:
                    raise EvidenceError(f"{GPU_FILE} line {number}: not JSON ({exc})") from None
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"{GPU_FILE}: not UTF-8 text ({exc})") from None
    if not events or events[0].get("kind") != "header":
        raise EvidenceError(f"{GPU_FILE}: the first line is not its header")
    check_format(events[0], (1,), f"{GPU_FILE} header")
    return events


# --- per pass -------------------------------------------------------------------------------


def _windows(events: list[dict], start: str, end: str) -> dict[str, list[dict]]:
    """label -> the readings from its `start` event to its `end` event, both included."""
    found, open_at = {}, {}
    for i, event in enumerate(events):
        if event["kind"] == start:
            open_at[event.get("label")] = i
        elif event["kind"] == end and event.get("label") in open_at:
            inside = events[open_at.pop(event.get("label")): i + 1]
            found[event["label"]] = [e for e in inside if e["kind"] != "error"]
    return found


def _integrated_j(readings: list[dict]) -> float | None:
    points = [(e["t_ns"], e["power_w"]) for e in readings if e.get("power_w") is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) / 1e9 * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairwise(points))


def _energy_j(readings: list[dict]) -> tuple[float | None, str]:
    first, last = readings[0].get("energy_mj"), readings[-1].get("energy_mj")
    if first is not None and last is not None:
        return (last - first) / 1000, "counter"
    return _integrated_j(readings), "integrated"


def _seconds(readings: list[dict]) -> float:
    return (readings[-1]["t_ns"] - readings[0]["t_ns"]) / 1e9


def _values(readings: list[dict], key: str) -> list[float]:
    return [e[key] for e in readings if e.get(key) is not None]


def _state(label: str, readings: list[dict]) -> dict[str, Any]:
    sm, mem = _values(readings, "sm_clock_mhz"), _values(readings, "mem_clock_mhz")
    temp, power = _values(readings, "temperature_c"), _values(readings, "power_w")
    mask = 0
    for value in _values(readings, "clock_event_reasons"):
        mask |= int(value)
    return {"label": label, "readings": len(readings),
            "sm_clock_mhz": {"min": min(sm), "median": median(sm), "max": max(sm)} if sm else None,
            "mem_clock_mhz": {"min": min(mem), "max": max(mem)} if mem else None,
            "temperature_c_max": max(temp) if temp else None,
            "power_w": {"mean": round(sum(power) / len(power), 3), "max": max(power)} if power else None,
            "clock_event_reasons": reason_names(mask), "clock_event_mask": mask,
            "slowdown": bool(mask & SLOWDOWN_REASONS)}


def _idle_w(readings: list[dict] | None) -> float | None:
    if not readings:
        return None
    joules, _ = _energy_j(readings)
    seconds = _seconds(readings)
    return joules / seconds if joules is not None and seconds > 0 else None


def _per_decision(joules: float | None, requests: int) -> float | None:
    return None if joules is None or requests == 0 else round(joules / requests, 6)


def _pass_energy(readings: list[dict], requests: int, idle_w: float | None) -> dict[str, Any]:
    joules, method = _energy_j(readings)
    seconds = _seconds(readings)
    above = None if joules is None or idle_w is None else joules - idle_w * seconds
    return {"requests": requests, "seconds": round(seconds, 6), "method": method,
            "joules": None if joules is None else round(joules, 6),
            "joules_per_decision": _per_decision(joules, requests),
            "mean_power_w": None if joules is None or seconds <= 0 else round(joules / seconds, 3),
            "above_idle_joules_per_decision": _per_decision(above, requests)}


def _total(passes: list[dict], key: str) -> float | None:
    values = [p[key] for p in passes]
    return None if not values or any(v is None for v in values) else sum(values)


def _backend_energy(passes: list[dict], idle_w: float | None) -> dict[str, Any]:
    joules, requests = _total(passes, "joules"), sum(p["requests"] for p in passes)
    above = None
    if joules is not None and idle_w is not None:
        above = joules - idle_w * sum(p["seconds"] for p in passes)
    return {"passes": passes, "requests": requests, "joules": None if joules is None else round(joules, 6),
            "joules_per_decision": _per_decision(joules, requests),
            "idle_power_w": None if idle_w is None else round(idle_w, 3),
            "above_idle_joules_per_decision": _per_decision(above, requests)}


def _granularity(events: list[dict]) -> dict[str, Any] | None:
    """The counter's steps as the readings saw them (bounded below by the sample period)."""
    points = [(e["t_ns"], e["energy_mj"]) for e in events if e.get("energy_mj") is not None]
    changes = [(t, v) for (_, prev), (t, v) in pairwise(points) if v != prev]
    steps = [b - a for (_, a), (_, b) in pairwise(points) if b > a]
    gaps = [(t1 - t0) / 1e6 for (t0, _), (t1, _) in pairwise(changes)]
    if not steps:
        return None
    return {"unit": "mJ", "smallest_step_mj": min(steps),
            "median_ms_between_changes": round(median(gaps), 3) if gaps else None,
            "note": "as seen by this run's readings; a sample period longer than the counter's update "
                    "interval hides its true granularity"}


def _per_pass(events: list[dict], pass_requests: dict[str, int]) -> tuple[dict[str, dict[str, list[dict]]], list[dict]]:
    """workload -> backend -> each measured pass's energy; and each pass's GPU state."""
    windows = _windows(events, "begin", "end")
    idle = _windows(events, "idle_begin", "idle_end")
    by_workload: dict[str, dict[str, list[dict]]] = {}
    states = []
    for label, requests in pass_requests.items():
        readings = windows.get(label)
        if not readings:
            continue
        backend, workload, _ = label.split("/", 2)
        by_workload.setdefault(workload, {}).setdefault(backend, []).append(
            {"label": label, **_pass_energy(readings, requests, _idle_w(idle.get(backend)))})
        states.append(_state(label, readings))
    return by_workload, states


def _workload_energy(by_workload: dict[str, dict[str, list[dict]]], idle: dict[str, list[dict]]
                     ) -> tuple[dict[str, Any], str]:
    """Per workload and backend: passes and overall figures; the method every pass used."""
    workloads = {wl: {b: _backend_energy(passes, _idle_w(idle.get(b))) for b, passes in sorted(found.items())}
                 for wl, found in sorted(by_workload.items())}
    methods = {p["method"] for found in by_workload.values() for passes in found.values() for p in passes}
    return workloads, COUNTER_METHOD if methods == {"counter"} else INTEGRATED_METHOD


IDLE_METHOD = ("idle power = energy over a quiet window after readiness (model loaded, nothing in flight, before "
               "the first inference) / its duration; above idle = pass energy - idle power x pass duration")


def energy_and_state(events: list[dict] | None, pass_requests: dict[str, int], backends: list[str],
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary.json's `energy`, its `gpu_state`) from gpu.jsonl's events and the requests of each
    measured pass, keyed by its label `<backend>/<workload>/measured-<i>`."""
    events = events or [{}]
    header = events[0]
    if not header.get("available"):
        absent = {"available": False, "reason": str(header.get("reason") or "no gpu.jsonl in this run")}
        return absent, dict(absent)
    by_workload, states = _per_pass(events, pass_requests)
    idle = _windows(events, "idle_begin", "idle_end")
    workloads, method = _workload_energy(by_workload, idle)
    energy = {"available": True, "driver": header.get("driver"), "sample_period_s": header.get("period_s"),
              "method": method, "idle_method": IDLE_METHOD, "counter": _granularity(events), "workloads": workloads}
    state = {"available": True, "slowdown_reasons": reason_names(SLOWDOWN_REASONS), "passes": states,
             "idle": [_state(f"{b}/idle", r) for b, r in idle.items() if b in backends]}
    return energy, state
