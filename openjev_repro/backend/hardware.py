"""The GPU's own ceilings, measured by the backend on the device it serves from (`--measure-hardware`).

Two figures, the inputs of the hardware floor that a study's report compares latencies with
(`results/floor.py`):

    matmul_bf16_tflops  dense BF16 matrix multiply, 8192 x 8192 x 8192, median of 20 runs timed with
                        CUDA events after 3 warm-up runs: 2 * 8192**3 / seconds / 1e12
    copy_tbps           a device-to-device copy of 2 GiB, median of 10 runs after 2 warm-ups, counting
                        the bytes read and the bytes written: 2 * bytes / seconds / 1e12

They are measured once, after the model is loaded and before the server reports ready, so every
study that asks for them records them for the GPU and the moment of that run.
"""

from __future__ import annotations

import functools
import statistics
from typing import Any

import msgspec

from ..errors import BackendError

__all__ = ["COPY_BYTES", "MATMUL_N", "GpuCeilings", "measure_hardware", "median_event_ms"]

MATMUL_N = 8192
COPY_BYTES = 2 << 30
METHOD = "CUDA events, medians (openjev_repro/backend/hardware.py)"


class GpuCeilings(msgspec.Struct, frozen=True, kw_only=True):
    """/health `hardware` (`to_json()`, in this order)."""

    gpu: str
    matmul_bf16_tflops: float
    matmul_shape: list[int] = msgspec.field(default_factory=lambda: [MATMUL_N, MATMUL_N, MATMUL_N])
    copy_tbps: float
    copy_bytes: int = COPY_BYTES
    method: str = METHOD

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


def median_event_ms(torch: Any, fn: Any, warmups: int, reps: int) -> float:
    """Median CUDA-event time of `fn()` in ms over `reps` runs, after `warmups` untimed ones."""
    for _ in range(warmups):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure_hardware(device: Any) -> GpuCeilings:
    """Matmul rate and copy bandwidth of a CUDA device (frees what it allocated before returning)."""
    import torch

    if torch.device(device).type != "cuda":
        raise BackendError(f"--measure-hardware measures a CUDA device; the model is on {device}. "
                           "Drop the flag or use --device cuda.")
    with torch.cuda.device(device):
        a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
        b = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
        matmul_ms = median_event_ms(torch, functools.partial(torch.matmul, a, b), 3, 20)
        del a, b
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        copy_ms = median_event_ms(torch, functools.partial(dst.copy_, src), 2, 10)
        del src, dst
        torch.cuda.empty_cache()
        name = torch.cuda.get_device_name(device)
    return GpuCeilings(gpu=name, matmul_bf16_tflops=round(2 * MATMUL_N**3 / (matmul_ms / 1e3) / 1e12, 1),
                       copy_tbps=round(2 * COPY_BYTES / (copy_ms / 1e3) / 1e12, 3))
