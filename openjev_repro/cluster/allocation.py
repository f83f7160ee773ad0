"""What a running array task got from Slurm: job, array index, node and GPU.

The GPU comes from the allocation (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES), never from the
recipe; its UUID from NVML where a driver is present. `slurm_record()` is what host.json records
under the key "slurm" (and the manifest with it, which copies host.json).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["slurm_record", "allocated_gpu", "SLURM_ENV"]

# Environment variables recorded verbatim (those that are set).
SLURM_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NAME", "SLURMD_NODENAME",
             "SLURM_JOB_NODELIST", "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_CLUSTER_NAME",
             "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES", "SLURM_CPUS_ON_NODE",
             "SLURM_JOB_CPUS_PER_NODE", "SLURM_MEM_PER_NODE", "SLURM_SUBMIT_HOST", "SLURM_RESTART_COUNT")


def _first_index(value: str | None) -> int | None:
    if not value:
        return None
    head = value.split(",")[0].strip()
    return int(head) if head.isdigit() else None


def _nvml_uuid(index: int) -> tuple[str | None, str | None]:
    """(uuid, why not) of the GPU at this NVML index."""
    try:
        from ..host.nvml import NvmlBackend

        gpus = {g.index: g for g in NvmlBackend().gpus()}
    except Exception as exc:  # noqa: BLE001 - no driver/NVML on this node: recorded, not fatal here
        return None, f"NVML unavailable: {type(exc).__name__}: {exc}"
    gpu = gpus.get(index)
    return (gpu.uuid, None) if gpu is not None else (None, f"NVML lists no GPU with index {index}")


def allocated_gpu(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The first GPU Slurm allocated: {"index", "uuid", "source", "uuid_error"}; None without a GPU.

    SLURM_JOB_GPUS holds the node's physical indices (NVML order); CUDA_VISIBLE_DEVICES is the
    fallback (with cgroup device constraints it is renumbered from 0, and NVML then sees only it).
    """
    env = os.environ if env is None else env
    for name in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(name)
        if value and value.startswith("GPU-"):
            return {"index": None, "uuid": value.split(",")[0], "source": name, "uuid_error": None}
        index = _first_index(value)
        if index is not None:
            uuid, error = _nvml_uuid(index)
            return {"index": index, "uuid": uuid, "source": name, "uuid_error": error}
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
