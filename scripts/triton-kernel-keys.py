#!/usr/bin/env python3
"""The Triton JIT cache keys of the project's own kernels, per checkout: will pinned caches still hit?

Triton keys a compiled kernel by its source text **and the line it starts on** (JITFunction.cache_key:
the dependencies' hash + `starting_line_number`), so an edit that only moves a kernel down a file makes
every pinned cache miss it: the kernel is compiled again and the pinned cache "changes". That is what
results/h200-fast-27b-shape/rerun/ (2026-12-05) shows: 32 files added to the best configuration's pinned
Triton cache, the four variants of conv_silu_kernel, gated_norm and silu_mul, whose text was unchanged since
the caches were packed at b665ccc but whose lines had moved (85 -> 91, 98 -> 90, 86 -> 78).

    python scripts/triton-kernel-keys.py [CHECKOUT ...]      (default: this checkout)

Compare the producing commit with the one you rerun (`git worktree add /tmp/old <commit>`): a key that
differs means re-pack the caches (scripts/h200-identity-call.sh host-a). Needs triton importable (no GPU):
OPENJEV_TRITON_PATH is added to the path (.ci/run installs triton 3.6.0 into .cache/triton-interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = """
import hashlib, json
from openjev_repro.backend import conv_silu, gate_kernels
gate_kernels._build()
kernels = {"conv_silu_kernel": conv_silu._build_kernel(), **{f"{k}_kernel": v for k, v in gate_kernels._KERNELS.items()}}
print(json.dumps({name: {"line": fn.starting_line_number, "source_sha256": hashlib.sha256(fn.src.encode()).hexdigest(),
                         "cache_key": fn.cache_key} for name, fn in sorted(kernels.items())}))
"""


def keys(checkout: Path) -> dict[str, dict]:
    """name -> line, source sha256 and Triton cache key of each kernel at `checkout`, in a fresh interpreter."""
    path = os.pathsep.join(p for p in (str(checkout), os.environ.get("OPENJEV_TRITON_PATH", "")) if p)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=checkout,
                          check=False, timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"error: {checkout}: the kernels' keys could not be read ({last}); is triton importable "
                         "(OPENJEV_TRITON_PATH)?")
    return json.loads(done.stdout)


def main(argv: list[str]) -> int:
    checkouts = [Path(a) for a in argv] or [REPO]
    missing = [str(c) for c in checkouts if not (c / "openjev_repro" / "backend" / "conv_silu.py").is_file()]
    if missing:
        print(f"error: {missing[0]} is not a checkout of this project (no openjev_repro/backend/conv_silu.py)",
              file=sys.stderr)
        return 2
    found = {c: keys(c) for c in checkouts}
    print(f"{'kernel':18s} {'checkout':40s} {'line':>4s}  {'source':12s}  cache key")
    for name in sorted({n for k in found.values() for n in k}):
        for checkout, table in found.items():
            entry = table.get(name)
            if entry is None:
                print(f"{name:18s} {str(checkout)[-40:]:40s} {'-':>4s}  absent")
                continue
            print(f"{name:18s} {str(checkout)[-40:]:40s} {entry['line']:4d}  {entry['source_sha256'][:12]}  "
                  f"{entry['cache_key'][:16]}")
    same = all(len({t.get(n, {}).get("cache_key") for t in found.values()}) == 1 for n in found[checkouts[0]])
    if len(checkouts) > 1:
        print("same keys: pinned caches made at one hit at the others" if same else
              "keys differ: caches pinned at one checkout compile these kernels again at the other")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
