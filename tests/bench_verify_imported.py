"""Time of `invoke verify` and `invoke compare` on imported runs, next to `sha256sum` over the same files.

Two synthetic system1-omni sources (tests/system1_synth.py, seeds 0 and 1) are imported once; then,
alternating in one process so every ratio compares timings taken side by side under the same load,
`--rounds` times (after one untimed verify that caches the bytecode, as an install does): `sha256sum` over
the first run's files, `invoke verify --run A`, `sha256sum` over
both runs' files, `invoke compare --baseline A --candidate B`. Medians and ratios are printed as JSON.

Run: python tests/bench_verify_imported.py --rows 96000 [--rounds 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_import_system1 import _WRAPPER
from system1_synth import write_source

ROOT = Path(__file__).resolve().parents[1]


def measure(argv: list[str]) -> dict:
    """Wall time, CPU time and peak RSS of one command (bench_import_system1's wrapper); a non-zero exit is
    recorded, not raised: compare exits 1 when it finds a difference, which is its answer, not a failure."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], cwd=ROOT, capture_output=True, text=True, check=True,
                         env=_ENV)
    return json.loads(out.stdout)


# As an installed tool runs: modules load from their cached bytecode (pip compiles them at install). A
# PYTHONDONTWRITEBYTECODE in the caller's environment would make every command compile ~60 modules first.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _files(run: Path) -> list[str]:
    return [str(p) for p in sorted(run.rglob("*")) if p.is_file()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=96_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    invoke = [sys.executable, "-m", "invoke"]
    runs = []
    for seed in (0, 1):
        src, run = work / f"src{seed}", work / f"run{seed}"
        if not run.is_dir():
            write_source(src, args.rows, seed=seed)
            subprocess.run([*invoke, "import-evidence", "--src", str(src), "--out", str(run)], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, env=_ENV)
        runs.append(run)
    a, b = runs
    for path in _files(a) + _files(b):  # warm page cache for every side
        Path(path).read_bytes()
    # Bytecode cached once, as after an install (invoke itself sets sys.dont_write_bytecode, so import directly).
    warm = "import tasks, openjev_repro.audit.verify, openjev_repro.audit.compare, openjev_repro.cli.audit"
    subprocess.run([sys.executable, "-c", warm], cwd=ROOT, check=True, env=_ENV)
    commands = {"sha256sum_a": ["sha256sum", *_files(a)], "verify": [*invoke, "verify", "--run", str(a)],
                "sha256sum_ab": ["sha256sum", *_files(a), *_files(b)],
                "compare": [*invoke, "compare", "--baseline", str(a), "--candidate", str(b)]}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, argv in commands.items():
            result = measure(argv)
            wall[name].append(result["wall_s"])
            cpu[name].append(result["cpu_s"])
    med = {k: statistics.median(v) for k, v in wall.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    size = sum(Path(p).stat().st_size for p in _files(a))
    print(json.dumps({"rows": args.rows, "run_mb": round(size / 1e6, 1), "rounds": args.rounds,
                      "median_wall_s": {k: round(v, 3) for k, v in med.items()},
                      "median_cpu_s": {k: round(v, 3) for k, v in cpu_med.items()},
                      "verify_ratio": round(med["verify"] / med["sha256sum_a"], 2),
                      "compare_ratio": round(med["compare"] / med["sha256sum_ab"], 2),
                      "verify_cpu_ratio": round(cpu_med["verify"] / cpu_med["sha256sum_a"], 2),
                      "compare_cpu_ratio": round(cpu_med["compare"] / cpu_med["sha256sum_ab"], 2)}, indent=2))


if __name__ == "__main__":
    main()
