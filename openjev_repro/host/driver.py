"""The small interface to the GPU driver: list GPUs, their compute processes, memory used.

Two real implementations (`nvml.NvmlDriver` through nvidia-ml-py, `smi.SmiDriver` through
the nvidia-smi CSV output). The test double for machines without a driver (`FakeGpus`) lives
in `tests/fake_gpus.py`: tests hand it to the code that takes a `GpuDriver` (`HostSession`,
`StudyOptions.gpu_driver`, `check_device`, `MemorySampler`, ...); nothing here selects it. `detect.detect_driver()` tries NVML first, then nvidia-smi, and raises
`NoDriver` when neither works, with a message that says so.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass

from ..errors import HostError

__all__ = ["SLOWDOWN_REASONS", "THROTTLE_REASONS", "GpuDriver", "GpuInfo", "GpuProcess", "NoDriver", "reason_names"]

# NVML clock-event (throttle) reason bits (nvmlClocksEventReason*), as nvidia-smi names them.
THROTTLE_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
# The reasons that mean the GPU was slowed by heat or by the hardware (gate gpu_not_throttled).
SLOWDOWN_REASONS = 0x8 | 0x20 | 0x40 | 0x80


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in a clock-event reason mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


class NoDriver(HostError):
    """Neither NVML nor nvidia-smi could talk to an NVIDIA driver on this host."""


@dataclass(frozen=True)
class GpuInfo:
    index: int  # the driver's index (NVML order, not CUDA_VISIBLE_DEVICES order)
    uuid: str  # "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    name: str
    memory_used_mib: int
    memory_total_mib: int
    pci_bus_id: str  # as the driver reports it, e.g. "00000000:3B:00.0"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str | None  # None where the driver does not say and /proc cannot tell
    used_memory_mib: int | None

    def to_dict(self) -> dict:
        return asdict(self)


class GpuDriver(ABC):
    """What the host controls need from a driver; nothing more."""

    name: str  # "nvml", "nvidia-smi" (a test double names itself)

    @abstractmethod
    def driver_version(self) -> str: ...

    @abstractmethod
    def gpus(self) -> list[GpuInfo]: ...

    @abstractmethod
    def processes(self, uuid: str) -> list[GpuProcess]:
        """Compute processes on the GPU with this UUID."""

    @abstractmethod
    def memory_used_mib(self, uuid: str) -> int: ...

    def gpu(self, uuid: str) -> GpuInfo:
        for info in self.gpus():
            if info.uuid == uuid:
                return info
        raise HostError(f"No GPU with UUID {uuid} on this host; `invoke gpus` lists the GPUs there are.")

    def gpu_state(self, uuid: str) -> dict | None:
        """One reading of the GPU's state: sm_clock_mhz, mem_clock_mhz, clock_event_reasons (mask),
        temperature_c, power_w and energy_mj (the total-energy counter; None where absent).
        None: this driver cannot read GPU state (the sampler records it as unavailable)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook: a driver without handles keeps this no-op
        """Release driver handles (NVML shutdown); idempotent."""

