"""Time and peak memory of `invoke import-evidence --format system1-omni`, next to `sha256sum`.

Both commands run as child processes in the same run, over the same synthetic source
(tests/system1_synth.py), alternating, `--rounds` times each. Each runs under a fresh
`python -c` wrapper whose RUSAGE_CHILDREN then holds exactly that one command: its CPU time
and its peak RSS (`ru_maxrss`).

Run: python tests/bench_import_system1.py --rows 96000 [--rounds 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from system1_synth import write_source

ROOT = Path(__file__).resolve().parents[1]
# Runs argv as a grandchild and prints its wall time, CPU time and peak RSS as JSON: RUSAGE_CHILDREN
# of this short-lived wrapper holds exactly one child.
_WRAPPER = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
wall = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "wall_s": wall, "cpu_s": u.ru_utime + u.ru_stime, "peak_rss_mb": u.ru_maxrss / 1024}))
"""


def measure(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"{argv} exited {result['rc']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=96_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-import-"))
    src = work / f"system1-{args.rows}"
    if not src.exists():
        write_source(src, args.rows)
    files = sorted(str(p) for p in src.rglob("*") if p.is_file())
    size_mb = sum(Path(f).stat().st_size for f in files) / 2**20
    results: dict[str, list[dict]] = {"sha256sum": [], "import": []}
    for n in range(args.rounds):
        results["sha256sum"].append(measure(["sha256sum", *files]))
        out = work / f"imported-{n}"
        shutil.rmtree(out, ignore_errors=True)
        results["import"].append(measure([str(ROOT / ".venv" / "bin" / "invoke"), "import-evidence", "--format",
                                          "system1-omni", "--src", str(src), "--out", str(out)]))
        shutil.rmtree(out, ignore_errors=True)
    print(f"source: {args.rows} rows, {len(files)} files, {size_mb:.1f} MiB")
    for name, rounds in results.items():
        for r in rounds:
            print(f"{name:10} wall {r['wall_s']:6.2f} s  cpu {r['cpu_s']:6.2f} s  peak RSS {r['peak_rss_mb']:7.1f} MiB"
                  f"  ({r['peak_rss_mb'] / size_mb:.2f}x source)")
    best = {k: min(r["wall_s"] for r in v) for k, v in results.items()}
    print(f"best wall: import {best['import']:.2f} s, sha256sum {best['sha256sum']:.2f} s, "
          f"ratio {best['import'] / best['sha256sum']:.1f}x; "
          f"max import peak RSS {max(r['peak_rss_mb'] for r in results['import']) / size_mb:.2f}x source")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
