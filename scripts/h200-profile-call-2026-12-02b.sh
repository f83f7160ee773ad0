#!/usr/bin/env bash
# Run from the repository root with the trees copied under .gpu-lane/{old,new} (git archive) and FLA wheels in .gpu-lane/whl; carry .gpu-lane.
# Issue 28, 2026-12-02 second session: the new best (conv-silu writes q/k/v contiguous, gated norm reads z in place)
# against the previous code's best on one host, both through the profile script's own HTTP server.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu-lane/whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
F=conv-silu,concat-in-proj,add-norm,gated-norm,grouped-qk,beta-g
{
  nvidia-smi --query-gpu=name,uuid,clocks.sm,temperature.gpu,power.draw --format=csv
  cd .gpu-lane/new; date -u
  PYTHONPATH=/tmp/site:$PWD timeout 250 python3 scripts/h200-fast-profile.py --out "$OUT/p/prof-new" --compile --fuse "$F" --prompt-ids cached
  echo "prof-new rc=$?"; cd ../old; date -u
  PYTHONPATH=/tmp/site:$PWD timeout 200 python3 scripts/h200-fast-profile.py --out "$OUT/p/prof-old" --compile --fuse "$F" --prompt-ids cached --skip-hardware --skip-profile
  echo "prof-old rc=$?"; date -u
  nvidia-smi --query-gpu=name,uuid,clocks.sm,temperature.gpu --format=csv
} 2>&1 | tee "$OUT/device-call.log"
tar -czf "$OUT/profiles.tar.gz" -C "$OUT/p" . && rm -rf "$OUT/p"
