"""Overhead benchmarks (issue 7): the timed client, parallel hashing, per-study calibration.

Each benchmark returns a typed result (a `machine.BenchResult`: its header, then its own fields)
that writes itself (`to_json`) and draws its table for the terminal; `openjev_repro/cli/bench.py`
wires them to invoke tasks.

Names are imported on first use: the loopback server child process imports this package and
should not pay for httpx or cryptography, which only the benchmarks need.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "BenchUsageError",
    "calibrate_client_overhead",
    "parse_sizes",
    "run_client_bench",
    "run_hash_bench",
]

_HOME = {
    "BenchUsageError": "hash_bench",
    "calibrate_client_overhead": "calibration",
    "parse_sizes": "hash_bench",
    "run_client_bench": "client_bench",
    "run_hash_bench": "hash_bench",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
