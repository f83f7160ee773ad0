"""GPU host controls: inventory, reservation, exact device, NUMA binding, memory samples.

    driver.py       GpuDriver interface (the GPU information source), NoDriver
    detect.py       detect_driver(): NVML first, then nvidia-smi
    nvml.py, smi.py the two real drivers (NVML first, nvidia-smi as fallback)
    reservation.py  reserve_gpus(): one flock per GPU UUID, holder details readable by others
    process.py      run_with_timeout(): a command's whole process group, ended at a deadline
    device.py       check_device() before, check_cleanup() after a study
    numa.py         numa_prefix(), docker_cpuset(), effective_binding()
    memory.py       MemorySampler: samples (not peaks) with pass boundaries
    inventory.py    inventory() for `invoke gpus`, host_record() for host.json
    allocation.py   slurm_record(): a Slurm task's job, array index, node and allocated GPU (host.json "slurm")
"""

from .detect import detect_driver
from .device import check_cleanup, check_device
from .driver import GpuDriver, GpuInfo, GpuProcess, NoDriver
from .inventory import HOST_FORMAT_VERSION, host_record, inventory
from .memory import MemorySampler
from .numa import docker_cpuset, effective_binding, numa_prefix, numa_summary, parse_cpulist, pci_numa_node
from .process import CommandOutcome, group_alive, run_with_timeout, stop_group
from .reservation import Reservation, holder_of, lock_dir, reserve_gpus

__all__ = [
    "HOST_FORMAT_VERSION",
    "CommandOutcome",
    "GpuDriver",
    "GpuInfo",
    "GpuProcess",
    "MemorySampler",
    "NoDriver",
    "Reservation",
    "check_cleanup",
    "check_device",
    "detect_driver",
    "docker_cpuset",
    "effective_binding",
    "group_alive",
    "holder_of",
    "host_record",
    "inventory",
    "lock_dir",
    "numa_prefix",
    "numa_summary",
    "parse_cpulist",
    "pci_numa_node",
    "reserve_gpus",
    "run_with_timeout",
    "stop_group",
]
