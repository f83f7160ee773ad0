"""Who measured, where and how: the header of every benchmark result file.

Format history of bench-results/*.json:
    1  (2026-11) first version.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

import msgspec

from ..evidence.files import write_json_atomic

__all__ = ["RESULT_FORMAT_VERSION", "BenchResult", "Machine", "describe_disk", "gib", "tree_bytes"]

RESULT_FORMAT_VERSION = 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Machine(msgspec.Struct, frozen=True, kw_only=True):
    """The machine a benchmark ran on, and how busy it was at the start."""

    cores: int | None
    usable_cores: int | None
    cpu_model: str
    platform: str
    python: str
    load_average_1m: float  # other work on the machine at the start

    @classmethod
    def here(cls) -> Machine:
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return cls(cores=os.cpu_count(), usable_cores=usable, cpu_model=_cpu_model(), platform=platform.platform(),
                   python=platform.python_version(), load_average_1m=round(os.getloadavg()[0], 2))


class Header(TypedDict):
    benchmark: str
    date: str
    machine: Machine
    command: str


class BenchResult(msgspec.Struct, frozen=True, kw_only=True):
    """The header of every result file; each benchmark's result adds its own fields after it."""

    format_version: int = RESULT_FORMAT_VERSION
    benchmark: str
    date: str
    machine: Machine
    command: str

    @staticmethod
    def header(benchmark: str, argv: list[str] | None = None) -> Header:
        """The header's fields, now: `SomeResult(**BenchResult.header("name"), ...)`."""
        argv = sys.argv if argv is None else argv
        return Header(benchmark=benchmark, date=datetime.now(UTC).isoformat(timespec="seconds"), machine=Machine.here(),
                      command=" ".join(shlex.quote(a) for a in [Path(argv[0]).name, *argv[1:]]))

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = msgspec.to_builtins(self)
        return data

    def write(self, path: Path) -> None:
        """Write the result file (replacing an older one: results are regenerated, then committed), with the
        load average at its end."""
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {**self.to_json(), "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
                          sort_keys=False)


def gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def describe_disk(path: Path) -> str:
    """`/home (ext4 on /dev/vda1): 120.0 GiB, 80.2 GiB free`: where a benchmark's files live."""
    import shutil

    real = Path(path).resolve()
    mount, fstype, device = "/", "?", "?"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, point, kind = (line.split() + ["?", "?", "?"])[:3]
            point = point.replace("\\040", " ")
            if (real == Path(point) or Path(point) in real.parents) and len(point) >= len(mount):
                mount, fstype, device = point, kind, dev
    except OSError:
        pass
    usage = shutil.disk_usage(real)
    return f"{mount} ({fstype} on {device}): {gib(usage.total)}, {gib(usage.free)} free"


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under path (0 when it is gone)."""
    if not Path(path).exists():
        return 0
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())
