"""GPU state beside the memory samples: clocks, clock-event (throttle) reasons, temperature, power
and the total-energy counter, sampled on a background thread; pass boundaries and each
backend's idle window read the state at the boundary itself.

gpu.jsonl holds a header line, then one line per reading:

    {"format_version": 1, "kind": "header", "available": true, "uuid": ..., "driver": "nvml",
     "period_s": 0.1, "note": ...}
    {"kind": "sample"|"begin"|"end"|"idle_begin"|"idle_end", "t_ns": ..., "label": ... (not on
     samples), "sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "clock_event_reasons": 4,
     "temperature_c": 41, "power_w": 595.2, "energy_mj": 123456789}
    {"kind": "error", "t_ns": ..., "error": "..."}

Without a GPU (or a driver that reads no state) the file is the header alone, with
"available": false and the reason. `results/energy.py` turns it into summary.json's `energy`
and `gpu_state`.

Format history: 1 (2026-12) first version.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Self

from ..errors import EvidenceError, HostError
from .driver import GpuDriver
from .periodic import PeriodicSampler

__all__ = ["GPU_STATE_FORMAT_VERSION", "GpuStateSampler", "unavailable_header", "write_unavailable"]

GPU_STATE_FORMAT_VERSION = 1
NOTE = "periodic samples plus a reading at every pass boundary; energy_mj is the driver's total-energy counter"


def unavailable_header(reason: str) -> dict:
    return {"format_version": GPU_STATE_FORMAT_VERSION, "kind": "header", "available": False, "reason": reason}


def _write_lines(path: Path, events: list[dict]) -> None:
    try:
        with open(path, "x", encoding="utf-8") as fh:
            fh.writelines(json.dumps(event, sort_keys=True) + "\n" for event in events)
    except FileExistsError as exc:
        raise EvidenceError(f"{path} already exists; GPU state samples are never overwritten.") from exc


def write_unavailable(path: Path, reason: str) -> None:
    """gpu.jsonl of a run that sampled no GPU state: the header with the reason."""
    _write_lines(path, [unavailable_header(reason)])


class GpuStateSampler(PeriodicSampler):
    """Read `driver.gpu_state(uuid)` every `period_s`, and at every boundary the runner marks."""

    def __init__(self, driver: GpuDriver, uuid: str, period_s: float = 0.1) -> None:
        self.driver, self.uuid, self.period_s = driver, uuid, period_s
        self._events: list[dict] = []
        self._lock = threading.Lock()
        self._init_periodic("GPU state sampler")
        self.unavailable: str | None = None

    def start(self) -> Self:
        if self._thread is not None:
            raise HostError("This GPU state sampler was already started; make a new one per study.")
        try:
            first = self.driver.gpu_state(self.uuid)
        except HostError as exc:
            first, self.unavailable = None, f"the {self.driver.name} driver could not read GPU state ({exc})"
        if first is None:
            self.unavailable = self.unavailable or f"the {self.driver.name} driver reads no GPU state"
            return self
        self._start_thread()
        return self

    def _tick(self) -> None:
        self.read("sample")

    def read(self, kind: str, label: str | None = None) -> dict | None:
        """One reading now, recorded as `kind` (a failed read is recorded as an error)."""
        if self.unavailable is not None:
            return None
        event: dict = {"kind": kind, "t_ns": time.monotonic_ns()}
        if label is not None:
            event["label"] = label
        try:
            state = self.driver.gpu_state(self.uuid)
        except Exception as exc:  # noqa: BLE001 - keep sampling: one failed read must not end the record
            event = {"kind": "error", "t_ns": event["t_ns"], "error": str(exc)[:300]}
            state = None
        else:
            event.update(state or {})
        with self._lock:
            self._events.append(event)
        return state

    def events(self) -> list[dict]:
        with self._lock:
            return list(self._events)

    def idle(self, label: str, seconds: float) -> None:
        """A quiet window: model loaded, nothing in flight; its readings give idle power."""
        if self.unavailable is not None or seconds <= 0:
            return
        self.read("idle_begin", label)
        time.sleep(seconds)
        self.read("idle_end", label)

    def write(self, path: Path) -> None:
        if self.unavailable is not None:
            write_unavailable(path, self.unavailable)
            return
        header = {"format_version": GPU_STATE_FORMAT_VERSION, "kind": "header", "available": True,
                  "uuid": self.uuid, "driver": self.driver.name, "period_s": self.period_s, "note": NOTE}
        _write_lines(path, [header, *self.events()])
