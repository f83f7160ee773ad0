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
from typing import Any

from ..evidence.files import write_json_atomic

__all__ = ["RESULT_FORMAT_VERSION", "machine_info", "result_header", "write_result"]

RESULT_FORMAT_VERSION = 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the machine at the start
    }


def result_header(benchmark: str, argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv if argv is None else argv
    return {
        "format_version": RESULT_FORMAT_VERSION,
        "benchmark": benchmark,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "command": " ".join(shlex.quote(a) for a in [Path(argv[0]).name, *argv[1:]]),
    }


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Write a result file (replacing an older one: results are regenerated, then committed)."""
    result = {**result, "load_average_1m_at_end": round(os.getloadavg()[0], 2)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, result, sort_keys=False)
