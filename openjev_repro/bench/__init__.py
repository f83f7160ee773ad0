"""Overhead benchmarks (issue 7): the timed client, parallel hashing, per-study calibration.

Each benchmark returns a JSON-able record (header from `machine.result_header`) and has a
formatter for the terminal; `openjev_repro/cli/bench.py` wires them to invoke tasks.
"""

from .calibration import calibrate_client_overhead
from .client_bench import format_client_table, run_client_bench
from .hash_bench import BenchUsageError, format_hash_table, parse_sizes, run_hash_bench
from .machine import write_result

__all__ = [
    "BenchUsageError",
    "calibrate_client_overhead",
    "format_client_table",
    "format_hash_table",
    "parse_sizes",
    "run_client_bench",
    "run_hash_bench",
    "write_result",
]
