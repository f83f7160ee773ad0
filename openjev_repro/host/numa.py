"""NUMA node and CPU binding: numactl prefixes for local runs, cpusets for docker, and what applied.

Everything reads the real sysfs and /proc; the roots are parameters so tests can point at a
copy when they need a host shape this machine does not have.
"""

from __future__ import annotations

import itertools
import shutil
from collections import Counter
from pathlib import Path

import msgspec

from ..errors import HostError

__all__ = [
    "NUMACTL_HINT",
    "NumaSummary",
    "docker_cpuset",
    "effective_binding",
    "format_cpulist",
    "node_cpus",
    "numa_nodes",
    "numa_prefix",
    "numa_summary",
    "parse_cpulist",
    "pci_numa_node",
]

NUMACTL_HINT = "Install it with `apt-get install numactl` (Debian/Ubuntu) or `dnf install numactl` (RHEL/Fedora)."


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (the kernel's list format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cpus.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError as exc:
            raise HostError(f"{text!r} is not a CPU list like 0-15 or 0,2,4-7.") from exc
    return sorted(set(cpus))


def format_cpulist(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'."""
    parts = []
    # consecutive CPUs share cpu - position, so each group is one run
    for _, run in itertools.groupby(enumerate(sorted(set(cpus))), key=lambda item: item[1] - item[0]):
        values = [cpu for _, cpu in run]
        parts.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
    return ",".join(parts)


def numa_nodes(sys_root: Path = Path("/sys")) -> list[int]:
    """Online NUMA nodes; [0] on a kernel without NUMA support (one node, as the kernel treats it)."""
    online = sys_root / "devices/system/node/online"
    return parse_cpulist(online.read_text()) if online.exists() else [0]


def node_cpus(node: int, sys_root: Path = Path("/sys")) -> list[int]:
    path = sys_root / f"devices/system/node/node{node}/cpulist"
    if not path.exists():
        if node == 0 and numa_nodes(sys_root) == [0]:
            return parse_cpulist((sys_root / "devices/system/cpu/online").read_text())
        raise HostError(f"NUMA node {node} does not exist on this host (nodes: {format_cpulist(numa_nodes(sys_root))}).")
    return parse_cpulist(path.read_text())


def pci_numa_node(bus_id: str, sys_root: Path = Path("/sys")) -> int | None:
    """NUMA node of a PCI device from sysfs; the driver's '00000000:3B:00.0' becomes '0000:3b:00.0'.

    None when sysfs does not know the device or reports -1 (no affinity)."""
    domain, _, rest = bus_id.strip().partition(":")
    path = sys_root / "bus/pci/devices" / f"{domain[-4:]}:{rest}".lower() / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


class NumaSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The host's NUMA nodes, their CPUs, and where numactl is (None: not installed)."""

    nodes: list[int]
    single_node: bool
    cpus_by_node: dict[str, str]
    numactl: str | None


def numa_summary(sys_root: Path = Path("/sys")) -> NumaSummary:
    """Nodes, their CPUs, and whether numactl is installed: for `invoke gpus`."""
    nodes = numa_nodes(sys_root)
    return NumaSummary(nodes=nodes, single_node=len(nodes) == 1,
                       cpus_by_node={str(n): format_cpulist(node_cpus(n, sys_root)) for n in nodes},
                       numactl=shutil.which("numactl"))


def _checked_cpus(node: int, cpus: str | None, sys_root: Path) -> str:
    """The CPU list to bind to: `cpus` if given (must belong to `node`), else all of the node's CPUs."""
    nodes = numa_nodes(sys_root)
    if node not in nodes:
        hint = " This host has a single NUMA node, 0." if len(nodes) == 1 else ""
        raise HostError(f"NUMA node {node} does not exist on this host (nodes: {format_cpulist(nodes)}).{hint}")
    local = node_cpus(node, sys_root)
    if cpus is None:
        return format_cpulist(local)
    foreign = sorted(set(parse_cpulist(cpus)) - set(local))
    if foreign:
        raise HostError(
            f"CPUs {format_cpulist(foreign)} are not on NUMA node {node} (its CPUs are {format_cpulist(local)}); "
            "fix controls.cpus or controls.numa_node in the recipe."
        )
    return cpus


def numa_prefix(node: int, cpus: str | None = None, sys_root: Path = Path("/sys")) -> list[str]:
    """`numactl --membind=N --physcpubind=CPUS` for a local backend's argv."""
    cpu_list = _checked_cpus(node, cpus, sys_root)
    numactl = shutil.which("numactl")
    if numactl is None:
        raise HostError(f"numactl is not installed, so the recipe's NUMA binding cannot be applied. {NUMACTL_HINT}")
    return [numactl, f"--membind={node}", f"--physcpubind={cpu_list}"]


def docker_cpuset(node: int, cpus: str | None = None, sys_root: Path = Path("/sys")) -> dict:
    """Keyword arguments for docker-py's containers.run: the same binding as numa_prefix."""
    return {"cpuset_cpus": _checked_cpus(node, cpus, sys_root), "cpuset_mems": str(node)}


def effective_binding(pid: int, proc_root: Path = Path("/proc")) -> dict:
    """What really applied to a process: Cpus_allowed_list and Mems_allowed_list from /proc/<pid>/status."""
    try:
        text = (proc_root / str(pid) / "status").read_text()
    except OSError as exc:
        raise HostError(f"Cannot read the binding of pid {pid}: {exc}. Was it still running?") from exc
    fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
    return {
        "pid": pid,
        "cpus_allowed_list": fields.get("Cpus_allowed_list", "").strip(),
        "mems_allowed_list": fields.get("Mems_allowed_list", "").strip(),
        "memory_policy": _memory_policy(pid, proc_root),
    }


def _memory_policy(pid: int, proc_root: Path) -> str | None:
    """The task's memory policy ("bind:0", "default", ...) from /proc/<pid>/numa_maps.

    --membind is a memory policy, not a cpuset, so Mems_allowed_list alone does not show it.
    Each mapping without its own policy shows the task's; the most common one is the task's."""
    try:
        lines = (proc_root / str(pid) / "numa_maps").read_text().splitlines()
    except OSError:
        return None  # no NUMA support in the kernel, or not ours to read
    policies = Counter(line.split()[1] for line in lines if len(line.split()) > 1)
    return policies.most_common(1)[0][0] if policies else None
