"""The host's GPUs as `invoke gpus` shows them, and the host.json record that a study writes.

host.json format history: 1 (2026-11) first version: {"format_version", "reservation",
"device", "binding", "cleanup", "memory"}; parts a study did not use are null.
"""

from __future__ import annotations

from pathlib import Path

from ..evidence.records import HostRecord
from .driver import GpuDriver
from .numa import numa_summary, pci_numa_node
from .reservation import holder_of

__all__ = ["HOST_FORMAT_VERSION", "format_inventory", "host_record", "inventory"]

HOST_FORMAT_VERSION = 1


def inventory(driver: GpuDriver, directory: Path | None = None) -> dict:
    """Every GPU with memory, compute processes, NUMA node and reservation holder."""
    gpus = []
    for gpu in driver.gpus():
        gpus.append({
            **gpu.to_dict(),
            "numa_node": pci_numa_node(gpu.pci_bus_id),
            "processes": [p.to_dict() for p in driver.processes(gpu.uuid)],
            "reserved_by": holder_of(gpu.uuid, directory),
        })
    return {"driver": {"backend": driver.name, "version": driver.driver_version()}, "gpus": gpus,
            "numa": numa_summary()}


def _holder(info: dict | None) -> str:
    if not info:
        return "free"
    note = f" {info['note']!r}" if info.get("note") else ""
    return f"pid {info.get('pid')} {info.get('user', '')}{note} since {info.get('started_at', '?')}"


def format_inventory(inv: dict) -> str:
    """Plain text, one block per GPU (stable for scripts and tests; --json for machines)."""
    lines = [f"driver {inv['driver']['version']} (via {inv['driver']['backend']}), {len(inv['gpus'])} GPU(s)"]
    for g in inv["gpus"]:
        procs = ", ".join(f"{p['pid']} {p['name'] or '?'}" for p in g["processes"]) or "none"
        numa = "unknown" if g["numa_node"] is None else g["numa_node"]
        lines += [
            f"GPU {g['index']}  {g['uuid']}  {g['name']}",
            f"  memory {g['memory_used_mib']} / {g['memory_total_mib']} MiB   NUMA node {numa}   PCI {g['pci_bus_id']}",
            f"  compute processes: {procs}",
            f"  reservation: {_holder(g['reserved_by'])}",
        ]
    numa = inv["numa"]
    nodes = ", ".join(f"{n}: CPUs {c}" for n, c in numa["cpus_by_node"].items())
    lines.append(f"NUMA nodes {nodes}" + (" (single node)" if numa["single_node"] else ""))
    lines.append(f"numactl: {numa['numactl'] or 'not installed (apt-get install numactl)'}")
    return "\n".join(lines)


def host_record(reservation: dict | None = None, device: dict | None = None, binding: dict | None = None,
                cleanup: dict | None = None, memory: dict | None = None) -> HostRecord:
    """The record host.json holds (the session adds controlled, gpu_override and slurm), decoded once here."""
    return HostRecord.from_json({"format_version": HOST_FORMAT_VERSION, "reservation": reservation, "device": device,
                                 "binding": binding, "cleanup": cleanup, "memory": memory}, "host.json")
