"""GpuDriver through NVML (the `pynvml` module of nvidia-ml-py)."""

from __future__ import annotations

from pathlib import Path

from ..errors import HostError
from .driver import GpuDriver, GpuInfo, GpuProcess

__all__ = ["NvmlDriver", "process_name"]

_MIB = 1024 * 1024


def _text(value: bytes | str) -> str:
    # Older nvidia-ml-py releases return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else value


def process_name(pid: int) -> str | None:
    """The command name from /proc, or None when the pid is not visible (another container)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


class NvmlDriver(GpuDriver):
    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # the package is a dependency; say so if it is missing
            raise HostError(f"nvidia-ml-py is not installed ({exc}).") from exc
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise HostError(f"NVML could not start ({exc}).") from exc
        self._open = True

    def _call(self, func, *args):
        try:
            return func(*args)
        except self._nvml.NVMLError as exc:
            raise HostError(f"NVML call {func.__name__} failed ({exc}).") from exc

    def _memory(self, handle):
        """Memory info v2, whose `used` leaves out driver-reserved memory, as nvidia-smi does.

        v1 counts the reserved part as used (615 MiB on an idle H200 with driver 580 where
        nvidia-smi says 0), which would hide "memory back to 0 MiB" after a study."""
        nv = self._nvml
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is not None:
            try:
                return nv.nvmlDeviceGetMemoryInfo(handle, version=version)
            except nv.NVMLError:
                pass  # an older driver without the v2 call
        return self._call(nv.nvmlDeviceGetMemoryInfo, handle)

    def _handle(self, uuid: str):
        return self._call(self._nvml.nvmlDeviceGetHandleByUUID, uuid)

    def driver_version(self) -> str:
        return _text(self._call(self._nvml.nvmlSystemGetDriverVersion))

    def gpus(self) -> list[GpuInfo]:
        nv = self._nvml
        found = []
        for index in range(self._call(nv.nvmlDeviceGetCount)):
            handle = self._call(nv.nvmlDeviceGetHandleByIndex, index)
            memory = self._memory(handle)
            found.append(GpuInfo(
                index=index,
                uuid=_text(self._call(nv.nvmlDeviceGetUUID, handle)),
                name=_text(self._call(nv.nvmlDeviceGetName, handle)),
                memory_used_mib=int(memory.used) // _MIB,
                memory_total_mib=int(memory.total) // _MIB,
                pci_bus_id=_text(self._call(nv.nvmlDeviceGetPciInfo, handle).busId),
            ))
        return found

    def processes(self, uuid: str) -> list[GpuProcess]:
        running = self._call(self._nvml.nvmlDeviceGetComputeRunningProcesses, self._handle(uuid))
        result = []
        for proc in running:
            used = getattr(proc, "usedGpuMemory", None)
            # NVML reports "not available" as None or as a huge sentinel value.
            used_mib = int(used) // _MIB if isinstance(used, int) and used < 2**63 else None
            result.append(GpuProcess(pid=int(proc.pid), name=process_name(int(proc.pid)), used_memory_mib=used_mib))
        return result

    def memory_used_mib(self, uuid: str) -> int:
        return int(self._memory(self._handle(uuid)).used) // _MIB

    def gpu_state(self, uuid: str) -> dict | None:
        nv, handle = self._nvml, self._handle(uuid)

        def read(name: str, *args):  # one field missing (an older driver) leaves the others
            func = getattr(nv, name, None)
            if func is None:
                return None
            try:
                return func(handle, *args)
            except nv.NVMLError:
                return None

        reasons = read("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None:
            reasons = read("nvmlDeviceGetCurrentClocksThrottleReasons")
        power = read("nvmlDeviceGetPowerUsage")  # mW
        return {"sm_clock_mhz": read("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
                "mem_clock_mhz": read("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM),
                "clock_event_reasons": None if reasons is None else int(reasons),
                "temperature_c": read("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU),
                "power_w": None if power is None else power / 1000,
                "energy_mj": read("nvmlDeviceGetTotalEnergyConsumption")}

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
