"""The host's GPUs as `invoke gpus` shows them, and the host.json record that a study writes.

host.json format history: 1 (2026-11) first version: {"format_version", "reservation",
"device", "binding", "cleanup", "memory"}; parts a study did not use are null.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ..evidence.records import DriverRef, HostRecord
from .driver import GpuDriver, GpuProcess
from .numa import NumaSummary, numa_summary, pci_numa_node
from .reservation import Holder, holder_of

__all__ = ["HOST_FORMAT_VERSION", "Inventory", "InventoryGpu", "format_inventory", "host_record", "inventory"]

HOST_FORMAT_VERSION = 1


class InventoryGpu(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU as `invoke gpus` lists it."""

    index: int
    uuid: str
    name: str
    memory_used_mib: int
    memory_total_mib: int
    pci_bus_id: str
    numa_node: int | None
    processes: list[GpuProcess]
    reserved_by: Holder | None

    def lines(self) -> list[str]:
        procs = ", ".join(f"{p.pid} {p.name or '?'}" for p in self.processes) or "none"
        numa = "unknown" if self.numa_node is None else self.numa_node
        holder = "free" if self.reserved_by is None else self.reserved_by.describe()
        return [f"GPU {self.index}  {self.uuid}  {self.name}",
                f"  memory {self.memory_used_mib} / {self.memory_total_mib} MiB   NUMA node {numa}   PCI {self.pci_bus_id}",
                f"  compute processes: {procs}",
                f"  reservation: {holder}"]


class Inventory(msgspec.Struct, frozen=True, kw_only=True):
    """Every GPU of the host with its memory, compute processes, NUMA node and reservation holder."""

    driver: DriverRef
    gpus: list[InventoryGpu]
    numa: NumaSummary

    def to_json(self) -> dict[str, object]:
        """What `invoke gpus --json` prints."""
        data: dict[str, object] = msgspec.json.decode(msgspec.json.encode(self))
        return data

    def text(self) -> str:
        """Plain text, one block per GPU (stable for scripts and tests; --json for machines)."""
        lines = [f"driver {self.driver.version} (via {self.driver.backend}), {len(self.gpus)} GPU(s)"]
        for gpu in self.gpus:
            lines += gpu.lines()
        nodes = ", ".join(f"{n}: CPUs {c}" for n, c in self.numa.cpus_by_node.items())
        lines.append(f"NUMA nodes {nodes}" + (" (single node)" if self.numa.single_node else ""))
        lines.append(f"numactl: {self.numa.numactl or 'not installed (apt-get install numactl)'}")
        return "\n".join(lines)


def inventory(driver: GpuDriver, directory: Path | None = None) -> Inventory:
    """Every GPU with memory, compute processes, NUMA node and reservation holder."""
    gpus = [InventoryGpu(index=gpu.index, uuid=gpu.uuid, name=gpu.name, memory_used_mib=gpu.memory_used_mib,
                         memory_total_mib=gpu.memory_total_mib, pci_bus_id=gpu.pci_bus_id,
                         numa_node=pci_numa_node(gpu.pci_bus_id), processes=driver.processes(gpu.uuid),
                         reserved_by=holder_of(gpu.uuid, directory)) for gpu in driver.gpus()]
    return Inventory(driver=DriverRef(backend=driver.name, version=driver.driver_version()), gpus=gpus,
                     numa=numa_summary())


def format_inventory(inv: Inventory) -> str:
    """Plain text, one block per GPU (stable for scripts and tests; --json for machines)."""
    return inv.text()


def host_record(reservation: dict | None = None, device: dict | None = None, binding: dict | None = None,
                cleanup: dict | None = None, memory: dict | None = None) -> HostRecord:
    """The record host.json holds (the session adds controlled, gpu_override and slurm), decoded once here."""
    return HostRecord.from_json({"format_version": HOST_FORMAT_VERSION, "reservation": reservation, "device": device,
                                 "binding": binding, "cleanup": cleanup, "memory": memory}, "host.json")
