"""The exact device: check the pinned GPU before the first backend starts and after the study.

Before: index and UUID must match the recipe, no compute process may run on it (unless the
recipe allows a busy GPU, which is recorded), and the memory used at start is recorded.
After: every process we started has exited and the memory is back to its starting value.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from ..errors import HostError
from .driver import GpuDriver, GpuInfo, GpuProcess
from .numa import pci_numa_node
from .process import group_alive, pid_exited

__all__ = ["check_cleanup", "check_device"]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _list_processes(procs: list[GpuProcess]) -> str:
    return ", ".join(f"pid {p.pid} ({p.name or 'name unknown'})" for p in procs)


def _mismatch(gpus: list[GpuInfo], gpu: GpuInfo | None, index: int, uuid: str) -> str:
    """What this host has instead of the pinned GPU: what sits at `index` and where `uuid` is."""
    elsewhere = next((g.index for g in gpus if g.uuid == uuid), None)
    where = f"{uuid} is GPU index {elsewhere}" if elsewhere is not None else f"no GPU on this host has UUID {uuid}"
    indices = sorted({g.index for g in gpus})
    found = f"GPU index {index} has UUID {gpu.uuid}" if gpu else f"there is no GPU index {index} (indices: {indices})"
    return f"{found} and {where}"


def _pinned_gpu(driver: GpuDriver, index: int, uuid: str) -> GpuInfo:
    """The GPU at `index` when its UUID is `uuid`; HostError saying what is there instead otherwise."""
    gpus = driver.gpus()
    gpu = {g.index: g for g in gpus}.get(index)
    if gpu is None or gpu.uuid != uuid:
        raise HostError(
            f"The recipe pins GPU index {index} with UUID {uuid}, but {_mismatch(gpus, gpu, index, uuid)}. "
            "Run on the pinned device or fix controls.gpu in the recipe (`invoke gpus` lists this host's GPUs)."
        )
    return gpu


def check_device(driver: GpuDriver, index: int, uuid: str, allow_busy: bool = False) -> dict:
    """Refuse a GPU that is not the pinned one or is busy; return the device record for host.json."""
    gpu = _pinned_gpu(driver, index, uuid)
    procs = driver.processes(uuid)
    if procs and not allow_busy:
        raise HostError(
            f"GPU {index} ({uuid}) is busy: {_list_processes(procs)} already run on it. Wait for them to finish, "
            "or set controls.allow_busy: true to measure on a shared GPU (recorded in host.json)."
        )
    return {
        "index": index,
        "uuid": uuid,
        "name": gpu.name,
        "memory_total_mib": gpu.memory_total_mib,
        "memory_used_at_start_mib": driver.memory_used_mib(uuid),
        "processes_at_start": [p.to_dict() for p in procs],
        "busy_at_start": bool(procs),
        "allow_busy": allow_busy,
        "pci_bus_id": gpu.pci_bus_id,
        "numa_node": pci_numa_node(gpu.pci_bus_id),
        "driver": {"backend": driver.name, "version": driver.driver_version()},
        "checked_at": _now(),
    }


def _owned_on_gpu(driver: GpuDriver, uuid: str, pids: list[int]) -> list[GpuProcess]:
    owned = set(pids)
    return [p for p in driver.processes(uuid) if p.pid in owned]


def _processes_check(driver: GpuDriver, uuid: str, pids: list[int], pgids: list[int]) -> dict:
    alive_pids = [pid for pid in pids if not pid_exited(pid)]
    alive_groups = [pgid for pgid in pgids if group_alive(pgid)]
    on_gpu = _owned_on_gpu(driver, uuid, pids)
    passed = not (alive_pids or alive_groups or on_gpu)
    detail = "every owned process exited" if passed else (
        f"still running: pids {alive_pids}, process groups {alive_groups}, on the GPU: {_list_processes(on_gpu) or 'none'}"
    )
    return {"name": "owned_processes_exited", "passed": passed, "detail": detail,
            "pids": list(pids), "pgids": list(pgids)}


def _memory_check(driver: GpuDriver, uuid: str, start_mib: int, tolerance_mib: int, wait_s: float, poll_s: float) -> dict:
    # Freed memory shows up in the driver with a delay, so poll for a while before judging.
    deadline = time.monotonic() + wait_s
    while True:
        used = driver.memory_used_mib(uuid)
        if used <= start_mib + tolerance_mib or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    passed = used <= start_mib + tolerance_mib
    return {
        "name": "memory_returned", "passed": passed, "start_mib": start_mib, "end_mib": used,
        "tolerance_mib": tolerance_mib,
        "detail": f"memory used {used} MiB after the study, {start_mib} MiB at start"
        + ("" if passed else f" (waited {wait_s:g} s; still {used - start_mib} MiB above the start)"),
    }


def check_cleanup(
    driver: GpuDriver,
    uuid: str,
    start_mib: int,
    pids: Sequence[int] = (),
    pgids: Sequence[int] = (),
    wait_s: float = 10.0,
    poll_s: float = 0.2,
    tolerance_mib: int = 0,
) -> dict:
    """After the study: owned processes gone and device memory back to its start. Recorded, never raised."""
    checks = [
        _processes_check(driver, uuid, list(pids), list(pgids)),
        _memory_check(driver, uuid, start_mib, tolerance_mib, wait_s, poll_s),
    ]
    return {"passed": all(c["passed"] for c in checks), "checks": checks, "checked_at": _now()}
