"""GpuDriver through `nvidia-smi --query-* --format=csv,noheader,nounits`: the fallback to NVML.

The parsers are pure functions of the CSV text, so they are tested on recorded output.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess

from ..errors import HostError
from .driver import GpuDriver, GpuInfo, GpuProcess

__all__ = ["APP_FIELDS", "GPU_FIELDS", "STATE_FIELDS", "SmiDriver", "parse_apps", "parse_gpus", "parse_state"]

GPU_FIELDS = ("index", "uuid", "name", "memory.used", "memory.total", "pci.bus_id")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
STATE_FIELDS = ("clocks.sm", "clocks.mem", "clocks_event_reasons.active", "temperature.gpu", "power.draw")
_MISSING = {"", "[N/A]", "N/A", "[Not Supported]", "[Insufficient Permissions]"}


def _rows(text: str, fields: tuple[str, ...]) -> list[tuple[str | None, ...]]:
    """Each CSV line's values in the order of `fields` (None for a value nvidia-smi could not read)."""
    rows = []
    for number, values in enumerate(csv.reader(io.StringIO(text), skipinitialspace=True), start=1):
        if not values or (len(values) == 1 and not values[0].strip()):
            continue
        if values[0].strip().startswith("No running"):  # older drivers print a sentence instead of nothing
            continue
        if len(values) != len(fields):
            raise HostError(
                f"nvidia-smi printed a line with {len(values)} fields where {len(fields)} were asked for "
                f"(line {number}: {','.join(values)!r}); the driver's output format is not understood."
            )
        rows.append(tuple(None if v.strip() in _MISSING else v.strip() for v in values))
    return rows


def _int(value: str | None) -> int | None:
    return None if value is None else int(float(value))


def _required(value: str | None, field: str, row: tuple[str | None, ...]) -> str:
    if value is None:
        raise HostError(f"nvidia-smi printed no {field} ({','.join(v or '' for v in row)}); the driver's output "
                        "format is not understood.")
    return value


def parse_gpus(text: str) -> list[GpuInfo]:
    """Parse `nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for row in _rows(text, GPU_FIELDS):
        index, uuid, name, used, total, bus_id = row
        gpus.append(GpuInfo(index=int(_required(index, "index", row)), uuid=uuid or "", name=name or "",
                            memory_used_mib=_int(used) or 0, memory_total_mib=_int(total) or 0, pci_bus_id=bus_id or ""))
    return gpus


def parse_apps(text: str) -> dict[str, list[GpuProcess]]:
    """Parse `nvidia-smi --query-compute-apps=<APP_FIELDS> --format=csv,noheader,nounits` by GPU UUID."""
    by_gpu: dict[str, list[GpuProcess]] = {}
    for row in _rows(text, APP_FIELDS):
        gpu_uuid, pid, process_name, used = row
        proc = GpuProcess(pid=int(_required(pid, "pid", row)), name=process_name, used_memory_mib=_int(used))
        by_gpu.setdefault(gpu_uuid or "", []).append(proc)
    return by_gpu


def parse_state(text: str) -> dict | None:
    """Parse `nvidia-smi --id=U --query-gpu=<STATE_FIELDS> --format=csv,noheader,nounits` (no energy
    counter there: energy is integrated from the sampled power)."""
    rows = _rows(text, STATE_FIELDS)
    if not rows:
        return None
    sm, mem, reasons, temperature, power = rows[0]
    return {"sm_clock_mhz": _int(sm), "mem_clock_mhz": _int(mem),
            "clock_event_reasons": int(reasons, 16) if reasons else None, "temperature_c": _int(temperature),
            "power_w": None if power is None else float(power), "energy_mj": None}


class SmiDriver(GpuDriver):
    name = "nvidia-smi"

    def __init__(self, executable: str = "nvidia-smi") -> None:
        path = shutil.which(executable)
        if path is None:
            raise HostError(f"{executable} is not on PATH.")
        self._exe = path
        # Also proves the driver answers: nvidia-smi exits non-zero when it cannot reach it.
        text = self._query("--query-gpu=driver_version")
        self._driver = text.splitlines()[0].strip() if text.strip() else ""

    def _query(self, *args: str) -> str:
        argv = [self._exe, *args, "--format=csv,noheader,nounits"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HostError(f"{' '.join(argv)} failed ({exc}).") from exc
        if done.returncode != 0:
            raise HostError(f"{' '.join(argv)} exited with {done.returncode}: {done.stdout.strip()} {done.stderr.strip()}".strip())
        return done.stdout

    def driver_version(self) -> str:
        return self._driver

    def gpus(self) -> list[GpuInfo]:
        return parse_gpus(self._query("--query-gpu=" + ",".join(GPU_FIELDS)))

    def processes(self, uuid: str) -> list[GpuProcess]:
        return parse_apps(self._query("--query-compute-apps=" + ",".join(APP_FIELDS))).get(uuid, [])

    def memory_used_mib(self, uuid: str) -> int:
        text = self._query(f"--id={uuid}", "--query-gpu=memory.used")
        value = _int(text.strip().splitlines()[0] if text.strip() else None)
        if value is None:
            raise HostError(f"nvidia-smi did not report memory used for GPU {uuid}.")
        return value

    def gpu_state(self, uuid: str) -> dict | None:
        return parse_state(self._query(f"--id={uuid}", "--query-gpu=" + ",".join(STATE_FIELDS)))
