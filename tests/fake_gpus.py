"""FakeGpus: a TEST DOUBLE of the GPU driver, for machines without an NVIDIA driver (CI, laptops).

It is the only stand-in the project allows, because no NVIDIA driver can run where the tests
run. It lives here, outside the package: `detect_driver()` never returns it, and tests hand it
to the code under test (`StudyOptions(gpu_driver=...)`, `HostSession(..., driver=...)`,
`check_device`, `MemorySampler`) as the `GpuDriver` it takes.
Everything around it (locks, process groups, NUMA, /proc) stays real.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from openjev_repro.errors import HostError
from openjev_repro.host.driver import GpuDriver, GpuInfo, GpuProcess

__all__ = ["FakeGpus"]


class FakeGpus(GpuDriver):
    """Test double. Holds GPUs in memory; tests change memory and processes while code runs."""

    name = "fake"

    def __init__(self, gpus: list[GpuInfo], driver: str = "fake-0.0") -> None:
        self._gpus = {g.uuid: g for g in gpus}
        self._procs: dict[str, list[GpuProcess]] = {g.uuid: [] for g in gpus}
        self._memory_script: dict[str, Callable[[], int]] = {}
        self._driver = driver
        self._lock = threading.Lock()
        self._state: dict[str, dict] = {}  # uuid -> clocks, reasons, temperature, power (enable_state)
        self._energy: dict[str, tuple[float, float]] = {}  # uuid -> (counter mJ, monotonic s at that value)

    @classmethod
    def h200(cls, count: int = 4) -> FakeGpus:
        """`count` idle H200s shaped like the published host (143771 MiB each)."""
        return cls([
            GpuInfo(index=i, uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", name="NVIDIA H200",
                    memory_used_mib=0, memory_total_mib=143771, pci_bus_id=f"00000000:{0x18 + i:02X}:00.0")
            for i in range(count)
        ])

    # --- what tests change -------------------------------------------------------------

    def set_memory(self, uuid: str, used_mib: int) -> None:
        with self._lock:
            self._gpus[uuid] = replace(self._require(uuid), memory_used_mib=used_mib)

    def script_memory(self, uuid: str, source: Callable[[], int]) -> None:
        """Answer memory_used_mib from `source()` (e.g. a counter that rises while a pass runs)."""
        with self._lock:
            self._memory_script[uuid] = source

    def add_process(self, uuid: str, pid: int, name: str | None = None, used_mib: int | None = None) -> None:
        with self._lock:
            self._require(uuid)
            self._procs[uuid].append(GpuProcess(pid=pid, name=name, used_memory_mib=used_mib))

    def enable_state(self, uuid: str, *, power_w: float = 78.0, sm_clock_mhz: int = 345, mem_clock_mhz: int = 3201,
                     temperature_c: int = 31, reasons: int = 0x1, energy_counter: bool = True,
                     counter_step_s: float = 0.02) -> None:
        """Answer gpu_state for this GPU: the given readings, and (with `energy_counter`) a total-energy
        counter that integrates `power_w` and advances in steps of `counter_step_s`, as NVML's does."""
        with self._lock:
            self._require(uuid)
            self._state[uuid] = {"sm_clock_mhz": sm_clock_mhz, "mem_clock_mhz": mem_clock_mhz,
                                 "clock_event_reasons": reasons, "temperature_c": temperature_c,
                                 "power_w": float(power_w), "energy_counter": energy_counter,
                                 "step_s": counter_step_s}
            self._energy[uuid] = (1_000_000.0, time.monotonic())

    def set_state(self, uuid: str, **changes) -> None:
        """Change readings (power_w, sm_clock_mhz, reasons -> clock_event_reasons, ...) from now on."""
        with self._lock:
            self._advance(uuid)
            if "reasons" in changes:
                changes["clock_event_reasons"] = changes.pop("reasons")
            self._state[uuid].update(changes)

    def _advance(self, uuid: str) -> float:
        """The counter now (mJ), whole steps of power x time since the last advance."""
        counter, since = self._energy[uuid]
        step = self._state[uuid]["step_s"]
        steps = int((time.monotonic() - since) / step)
        counter += steps * step * self._state[uuid]["power_w"] * 1000
        self._energy[uuid] = (counter, since + steps * step)
        return counter

    def gpu_state(self, uuid: str) -> dict | None:
        with self._lock:
            self._require(uuid)
            if uuid not in self._state:
                return None
            state = {k: v for k, v in self._state[uuid].items() if k not in ("energy_counter", "step_s")}
            counter = self._advance(uuid)
            return {**state, "energy_mj": int(counter) if self._state[uuid]["energy_counter"] else None}

    # --- GpuDriver --------------------------------------------------------------------

    def _require(self, uuid: str) -> GpuInfo:
        if uuid not in self._gpus:
            raise HostError(f"No GPU with UUID {uuid} on this host; `invoke gpus` lists the GPUs there are.")
        return self._gpus[uuid]

    def driver_version(self) -> str:
        return self._driver

    def gpus(self) -> list[GpuInfo]:
        with self._lock:
            return sorted(
                (replace(g, memory_used_mib=self.memory_used_mib_unlocked(g.uuid)) for g in self._gpus.values()),
                key=lambda g: g.index,
            )

    def processes(self, uuid: str) -> list[GpuProcess]:
        with self._lock:
            self._require(uuid)
            return list(self._procs[uuid])

    def memory_used_mib(self, uuid: str) -> int:
        with self._lock:
            return self.memory_used_mib_unlocked(uuid)

    def memory_used_mib_unlocked(self, uuid: str) -> int:
        gpu = self._require(uuid)
        script = self._memory_script.get(uuid)
        return int(script()) if script else gpu.memory_used_mib
