"""What a running array task got from Slurm: job, array index, node and GPU.

The GPU comes from the allocation (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES), never from the
recipe; its UUID from NVML where a driver is present. `slurm_record()` is what host.json records
under the key "slurm" (and the manifest with it, which copies host.json).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["SLURM_ENV", "allocated_gpu", "slurm_record", "visible_index"]

# Environment variables recorded verbatim (those that are set).
SLURM_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NAME", "SLURMD_NODENAME",
             "SLURM_JOB_NODELIST", "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_CLUSTER_NAME",
             "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES", "SLURM_CPUS_ON_NODE",
             "SLURM_JOB_CPUS_PER_NODE", "SLURM_MEM_PER_NODE", "SLURM_SUBMIT_HOST", "SLURM_RESTART_COUNT")


def _indices(value: str | None) -> list[int]:
    parts = [p.strip() for p in (value or "").split(",")]
    return [int(p) for p in parts if p.isdigit()]


def visible_index(allocated: list[int], visible: list[int]) -> int | None:
    """The NVML index, as the job sees it, of the first allocated GPU.

    Without device constraints NVML shows every GPU of the node under its physical index (the
    one in SLURM_JOB_GPUS). With cgroup ConstrainDevices=yes it shows only the allocated GPUs,
    renumbered from 0 in allocation order.
    """
    if not allocated:
        return None
    if len(visible) == len(allocated) and sorted(visible) == list(range(len(allocated))):
        return 0  # constrained (or the whole node allocated, where both numberings agree)
    return allocated[0] if allocated[0] in visible else None


def _nvml_gpu(allocated: list[int]) -> tuple[int | None, str | None, str | None]:
    """(NVML index, uuid, why not) of the first allocated GPU."""
    try:
        from .nvml import NvmlDriver

        gpus = {g.index: g for g in NvmlDriver().gpus()}
    except Exception as exc:  # noqa: BLE001 - no driver/NVML on this node: recorded, not fatal here
        return None, None, f"NVML unavailable: {type(exc).__name__}: {exc}"
    index = visible_index(allocated, sorted(gpus))
    if index is None:
        return None, None, f"NVML lists no GPU for the allocated index {allocated[0]} (it sees {sorted(gpus)})"
    return index, gpus[index].uuid, None


def allocated_gpu(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The first GPU Slurm allocated: {"allocated", "index", "uuid", "source", "uuid_error"}; None without one.

    "allocated" is Slurm's index (SLURM_JOB_GPUS: the node's physical numbering, else
    CUDA_VISIBLE_DEVICES); "index" is the NVML index the job sees (see `visible_index`).
    """
    env = os.environ if env is None else env
    for name in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(name)
        if value and value.startswith("GPU-"):
            return {"allocated": None, "index": None, "uuid": value.split(",")[0], "source": name, "uuid_error": None}
        allocated = _indices(value)
        if allocated:
            index, uuid, error = _nvml_gpu(allocated)
            return {"allocated": allocated[0], "index": index, "uuid": uuid, "source": name, "uuid_error": error}
    return None


def slurm_record(env: Mapping[str, str] | None = None, *, with_gpu: bool = True) -> dict[str, Any] | None:
    """host.json's "slurm" entry; None outside a Slurm job."""
    env = os.environ if env is None else env
    if not env.get("SLURM_JOB_ID"):
        return None
    task = env.get("SLURM_ARRAY_TASK_ID")
    return {
        "job_id": env["SLURM_JOB_ID"],
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": int(task) if task and task.isdigit() else None,
        "node": env.get("SLURMD_NODENAME"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "gpu": allocated_gpu(env) if with_gpu else None,
        "env": {k: env[k] for k in SLURM_ENV if k in env},
    }
