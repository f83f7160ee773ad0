"""GPU host controls: inventory, reservation, exact device, NUMA binding, memory samples.

    driver.py       GpuDriver interface (the GPU information source), detect_driver(), NoDriver
    nvml.py, smi.py the two real drivers (NVML first, nvidia-smi as fallback)
    reservation.py  reserve_gpus(): one flock per GPU UUID, holder details readable by others
    process.py      run_with_timeout(): a command's whole process group, ended at a deadline
    device.py       check_device() before, check_cleanup() after a study
    numa.py         numa_prefix(), docker_cpuset(), effective_binding()
    memory.py       MemorySampler: samples (not peaks) with pass boundaries
    inventory.py    inventory() for `invoke gpus`, host_record() for host.json
    allocation.py   slurm_record(): a Slurm task's job, array index, node and allocated GPU (host.json "slurm")
"""

from .driver import GpuDriver, GpuInfo, GpuProcess, NoDriver, detect_driver
from .device import check_cleanup, check_device
from .inventory import HOST_FORMAT_VERSION, format_inventory, host_record, inventory
from .memory import MemorySampler
from .numa import docker_cpuset, effective_binding, numa_prefix, numa_summary, parse_cpulist, pci_numa_node
from .process import group_alive, run_with_timeout, stop_group
from .reservation import Reservation, holder_of, lock_dir, reserve_gpus

__all__ = [
    "GpuDriver", "GpuInfo", "GpuProcess", "NoDriver", "detect_driver",
    "check_device", "check_cleanup",
    "inventory", "format_inventory", "host_record", "HOST_FORMAT_VERSION",
    "MemorySampler",
    "numa_prefix", "docker_cpuset", "effective_binding", "numa_summary", "parse_cpulist", "pci_numa_node",
    "run_with_timeout", "stop_group", "group_alive",
    "reserve_gpus", "Reservation", "holder_of", "lock_dir",
]
