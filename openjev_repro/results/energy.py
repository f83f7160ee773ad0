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

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import Annotated, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..errors import EvidenceError
from ..evidence.files import check_format
from ..evidence.summary import (
    BackendEnergy,
    ClockRange,
    CounterSteps,
    Energy,
    GpuState,
    PassEnergy,
    PassState,
    PowerRange,
)
from ..host.driver import SLOWDOWN_REASONS, reason_names

__all__ = ["GPU_FILE", "GpuHeader", "GpuLog", "GpuReading", "energy_and_state", "read_gpu_events"]

GPU_FILE = "gpu.jsonl"
COUNTER_METHOD = ("NVML total-energy counter (mJ) read just before the pass's first request and just after its "
                  "last response; joules per decision = pass energy / pass requests")
INTEGRATED_METHOD = ("no energy counter: sampled power integrated over the pass (trapezoids between readings); "
                     "joules per decision = pass energy / pass requests")

# Bounds of what a reading may hold, checked while decoding, so no arithmetic below meets a huge or odd value.
_Time = Annotated[int, Meta(ge=0, le=2**63 - 1)]
_Value = Annotated[int, Meta(ge=-(10**18), le=10**18)] | Annotated[float, Meta(ge=-1e18, le=1e18)]
T = TypeVar("T")
_BOUNDARIES = ("begin", "end", "idle_begin", "idle_end")


class GpuHeader(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """gpu.jsonl's first line (host/gpu_state.py writes it)."""

    format_version: int
    kind: Literal["header"]
    available: bool
    reason: str | UnsetType = UNSET  # available: false
    uuid: str | UnsetType = UNSET
    driver: str | UnsetType = UNSET
    period_s: _Value | UnsetType = UNSET
    note: str | UnsetType = UNSET


class GpuReading(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One reading: a periodic sample, a pass or idle boundary (labelled), or a failed read."""

    kind: Literal["sample", "begin", "end", "idle_begin", "idle_end", "error"]
    t_ns: _Time | UnsetType = UNSET  # required: checked in __post_init__ with a message naming the event
    label: str | UnsetType = UNSET
    sm_clock_mhz: _Value | None | UnsetType = UNSET
    mem_clock_mhz: _Value | None | UnsetType = UNSET
    clock_event_reasons: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None | UnsetType = UNSET
    temperature_c: _Value | None | UnsetType = UNSET
    power_w: _Value | None | UnsetType = UNSET
    energy_mj: _Value | None | UnsetType = UNSET
    error: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        if isinstance(self.t_ns, UnsetType):
            raise TypeError(f"a {self.kind} event without t_ns")
        if self.kind in _BOUNDARIES and isinstance(self.label, UnsetType):
            raise ValueError(f"a {self.kind} event without a label")

    @property
    def at_ns(self) -> int:
        """Its time (every decoded reading has one)."""
        return 0 if isinstance(self.t_ns, UnsetType) else self.t_ns

    def value(self, name: Literal["sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "energy_mj"]
              ) -> int | float | None:
        found: int | float | None | UnsetType = getattr(self, name)
        return None if isinstance(found, UnsetType) else found


@dataclass(frozen=True)
class GpuLog:
    """gpu.jsonl decoded: its header and its readings in file order."""

    header: GpuHeader
    readings: list[GpuReading]


_HEADER = msgspec.json.Decoder(GpuHeader)
_READING = msgspec.json.Decoder(GpuReading)


def _header(line: bytes) -> GpuHeader:
    """The first line: its format version checked before any other field is trusted."""
    try:
        first = msgspec.json.decode(line)
    except msgspec.DecodeError:
        first = None
    if not isinstance(first, dict) or first.get("kind") != "header":
        raise EvidenceError(f"{GPU_FILE}: the first line is not its header")
    check_format(first, (1,), f"{GPU_FILE} header")
    return _HEADER.decode(line)


def read_gpu_events(path: Path) -> GpuLog:
    """gpu.jsonl's header and readings; EvidenceError (one line, naming the line and the field) for anything else.

    Every field is decoded into its type with its bounds (times 0 <= t_ns < 2**63, readings within
    +-1e18), and a boundary reading must name its label, so nothing computed from them can overflow."""
    lines = [(number, line) for number, line in enumerate(Path(path).read_bytes().splitlines(), start=1)
             if line.strip()]
    if not lines:
        raise EvidenceError(f"{GPU_FILE}: the first line is not its header")
    header = _decoded(lines[0], _header)
    return GpuLog(header, [_decoded(entry, _READING.decode) for entry in lines[1:]])


def _decoded(entry: tuple[int, bytes], decode: Callable[[bytes], T]) -> T:
    number, line = entry
    try:
        return decode(line)
    except msgspec.DecodeError as exc:  # syntax, a wrong type, a value out of bounds, a missing key
        raise EvidenceError(f"{GPU_FILE} line {number}: {exc}") from None


# --- per pass -------------------------------------------------------------------------------


def _windows(readings: list[GpuReading], start: str, end: str) -> dict[str, list[GpuReading]]:
    """label -> the readings from its `start` event to its `end` event, both included."""
    found: dict[str, list[GpuReading]] = {}
    open_at: dict[str, int] = {}
    for i, event in enumerate(readings):
        if isinstance(event.label, UnsetType):
            continue
        if event.kind == start:
            open_at[event.label] = i
        elif event.kind == end and event.label in open_at:
            inside = readings[open_at.pop(event.label): i + 1]
            found[event.label] = [e for e in inside if e.kind != "error"]
    return found


def _energy_j(readings: list[GpuReading]) -> tuple[float | None, Literal["counter", "integrated"]]:
    first, last = readings[0].value("energy_mj"), readings[-1].value("energy_mj")
    if first is not None and last is not None:
        return (last - first) / 1000, "counter"
    points = [(e.at_ns, power) for e in readings if (power := e.value("power_w")) is not None]  # trapezoids
    if len(points) < 2:
        return None, "integrated"
    return math.fsum((t1 - t0) / 1e9 * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairwise(points)), "integrated"


def _seconds(readings: list[GpuReading]) -> float:
    return (readings[-1].at_ns - readings[0].at_ns) / 1e9


def _values(readings: list[GpuReading], name: Literal["sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w"]
            ) -> list[int | float]:
    return [v for e in readings if (v := e.value(name)) is not None]


def _state(label: str, readings: list[GpuReading]) -> PassState:
    sm, mem = _values(readings, "sm_clock_mhz"), _values(readings, "mem_clock_mhz")
    temp, power = _values(readings, "temperature_c"), _values(readings, "power_w")
    mask = 0
    for e in readings:
        mask |= e.clock_event_reasons if isinstance(e.clock_event_reasons, int) else 0
    return PassState(label=label, readings=len(readings),
                     sm_clock_mhz=ClockRange(min=min(sm), median=median(sm), max=max(sm)) if sm else None,
                     mem_clock_mhz=ClockRange(min=min(mem), max=max(mem)) if mem else None,
                     temperature_c_max=max(temp) if temp else None,
                     power_w=PowerRange(mean=round(math.fsum(power) / len(power), 3), max=max(power)) if power else None,
                     clock_event_reasons=reason_names(mask), clock_event_mask=mask,
                     slowdown=bool(mask & SLOWDOWN_REASONS))


def _idle_w(readings: list[GpuReading] | None) -> float | None:
    if not readings:
        return None
    joules, _ = _energy_j(readings)
    seconds = _seconds(readings)
    return joules / seconds if joules is not None and seconds > 0 else None


def _per_decision(joules: float | None, requests: int) -> float | None:
    return None if joules is None or requests == 0 else round(joules / requests, 6)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _backend_energy(passes: list[PassEnergy], idle_w: float | None) -> BackendEnergy:
    known = [p.joules for p in passes if p.joules is not None]  # None: nothing to add, or any pass unknown
    joules = math.fsum(known) if passes and len(known) == len(passes) else None
    requests = sum(p.requests for p in passes)
    above = None if joules is None or idle_w is None else joules - idle_w * math.fsum(p.seconds for p in passes)
    return BackendEnergy(passes=passes, requests=requests, joules=_round(joules, 6),
                         joules_per_decision=_per_decision(joules, requests), idle_power_w=_round(idle_w, 3),
                         above_idle_joules_per_decision=_per_decision(above, requests))


def _granularity(readings: list[GpuReading]) -> CounterSteps | None:
    """The counter's steps as the readings saw them (bounded below by the sample period)."""
    points = [(e.at_ns, v) for e in readings if (v := e.value("energy_mj")) is not None]
    changes = [(t, v) for (_, prev), (t, v) in pairwise(points) if v != prev]
    steps = [b - a for (_, a), (_, b) in pairwise(points) if b > a]
    gaps = [(t1 - t0) / 1e6 for (t0, _), (t1, _) in pairwise(changes)]
    if not steps:
        return None
    return CounterSteps(unit="mJ", smallest_step_mj=min(steps),
                        median_ms_between_changes=round(median(gaps), 3) if gaps else None,
                        note="as seen by this run's readings; a sample period longer than the counter's update "
                             "interval hides its true granularity")


def _per_pass(log: GpuLog, pass_requests: dict[str, int], idle: dict[str, list[GpuReading]]
              ) -> tuple[dict[str, dict[str, list[PassEnergy]]], list[PassState]]:
    """workload -> backend -> each measured pass's energy; and each pass's GPU state."""
    windows = _windows(log.readings, "begin", "end")
    by_workload: dict[str, dict[str, list[PassEnergy]]] = {}
    states = []
    for label, requests in pass_requests.items():
        readings = windows.get(label)
        if not readings:
            continue
        backend, workload, _ = label.split("/", 2)
        joules, method = _energy_j(readings)
        seconds, idle_w = _seconds(readings), _idle_w(idle.get(backend))
        above = None if joules is None or idle_w is None else joules - idle_w * seconds
        by_workload.setdefault(workload, {}).setdefault(backend, []).append(PassEnergy(
            label=label, requests=requests, seconds=round(seconds, 6), method=method,
            joules=None if joules is None else round(joules, 6), joules_per_decision=_per_decision(joules, requests),
            mean_power_w=None if joules is None or seconds <= 0 else round(joules / seconds, 3),
            above_idle_joules_per_decision=_per_decision(above, requests)))
        states.append(_state(label, readings))
    return by_workload, states


def _workload_energy(by_workload: dict[str, dict[str, list[PassEnergy]]], idle: dict[str, list[GpuReading]]
                     ) -> tuple[dict[str, dict[str, BackendEnergy]], str]:
    """Per workload and backend: passes and overall figures; the method every pass used."""
    workloads = {wl: {b: _backend_energy(passes, _idle_w(idle.get(b))) for b, passes in sorted(found.items())}
                 for wl, found in sorted(by_workload.items())}
    methods = {p.method for found in by_workload.values() for passes in found.values() for p in passes}
    return workloads, COUNTER_METHOD if methods == {"counter"} else INTEGRATED_METHOD


IDLE_METHOD = ("idle power = energy over a quiet window after readiness (model loaded, nothing in flight, before "
               "the first inference) / its duration; above idle = pass energy - idle power x pass duration")


def energy_and_state(log: GpuLog, pass_requests: dict[str, int], backends: list[str]) -> tuple[Energy, GpuState]:
    """(summary.json's `energy`, its `gpu_state`) from gpu.jsonl and the requests of each measured pass,
    keyed by its label `<backend>/<workload>/measured-<i>`."""
    header = log.header
    if not header.available:
        reason = header.reason if isinstance(header.reason, str) and header.reason else "no gpu.jsonl in this run"
        return Energy(available=False, reason=reason), GpuState(available=False, reason=reason)
    idle = _windows(log.readings, "idle_begin", "idle_end")
    by_workload, states = _per_pass(log, pass_requests, idle)
    workloads, method = _workload_energy(by_workload, idle)
    energy = Energy(available=True, driver=None if isinstance(header.driver, UnsetType) else header.driver,
                    sample_period_s=None if isinstance(header.period_s, UnsetType) else header.period_s,
                    method=method, idle_method=IDLE_METHOD, counter=_granularity(log.readings), workloads=workloads)
    state = GpuState(available=True, slowdown_reasons=reason_names(SLOWDOWN_REASONS), passes=states,
                     idle=[_state(f"{b}/idle", r) for b, r in idle.items() if b in backends])
    return energy, state
