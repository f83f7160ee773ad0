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

__all__ = ["GpuDriver", "GpuInfo", "GpuProcess", "NoDriver"]


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

    def close(self) -> None:  # noqa: B027 - optional hook: a driver without handles keeps this no-op
        """Release driver handles (NVML shutdown); idempotent."""

