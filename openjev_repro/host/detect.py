"""Which GPU driver interface answers on this host: NVML first, then nvidia-smi (`detect_driver`).

Its own module, above `driver.py`, `nvml.py` and `smi.py`: the interface does not import its
implementations, so the host package has no import cycle.
"""

from __future__ import annotations

from ..errors import HostError
from .driver import GpuDriver, NoDriver
from .nvml import NvmlDriver
from .smi import SmiDriver

__all__ = ["detect_driver"]


def detect_driver() -> GpuDriver:
    """NVML through nvidia-ml-py first, nvidia-smi as fallback; NoDriver if neither answers."""
    reasons = []
    for make in (NvmlDriver, SmiDriver):
        try:
            return make()
        except HostError as exc:
            reasons.append(str(exc))
    raise NoDriver(
        "No NVIDIA driver was found on this host: " + " ".join(reasons)
        + " Run this on a GPU host with the NVIDIA driver installed."
    )
