#!/usr/bin/env bash
# One device call of issue 28's profile (2026-12-02): kernel checks of the new fusions, then the
# profile script for the new best configuration and, on the same host, the previous best.
# Run from a copy of the repository with the fixture in .cache/demo and the wheels in $WHEELS;
# everything lands in $OUT (a log, the JSON results and one tarball of the profile folders).
set -u
WHEELS=${WHEELS:-../whl}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
NEW=conv-silu,concat-in-proj,add-norm,gated-norm,grouped-qk,beta-g
step() { local name=$1 limit=$2; shift 2; date -u; timeout "$limit" "$@"; echo "$name rc=$?"; }
{
  nvidia-smi --query-gpu=name,uuid,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton, transformers, fla; print(torch.__version__, triton.__version__, transformers.__version__, fla.__version__)"
  step kernel-check 90 python3 scripts/h200-kernel-check.py --out "$OUT/kernel-check.json" --checks gated-norm,grouped-qk
  step prof-new 240 python3 scripts/h200-fast-profile.py --out "$OUT/p/prof-new" --compile --fuse "$NEW" --prompt-ids cached
  step prof-old 170 python3 scripts/h200-fast-profile.py --out "$OUT/p/prof-old" --compile --fuse all --prompt-ids cached \
       --skip-hardware --skip-profile
  date -u
  nvidia-smi --query-gpu=name,uuid,clocks.sm,temperature.gpu --format=csv
} 2>&1 | tee "$OUT/device-call.log"
tar -czf "$OUT/profiles.tar.gz" -C "$OUT/p" . && rm -rf "$OUT/p"
