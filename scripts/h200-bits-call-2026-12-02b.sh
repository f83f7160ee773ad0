#!/usr/bin/env bash
# Run from the repository root with the trees copied under .gpu-lane/{old,newz,new} (newz: new with z in place disabled) and FLA wheels in .gpu-lane/whl; carry .gpu-lane.
# Which change moved the bits: old code, new code without z in place (q/k/v contiguous only), new code; one host.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu-lane/whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
F=conv-silu,concat-in-proj,add-norm,gated-norm,grouped-qk,beta-g
{
  nvidia-smi --query-gpu=name,uuid --format=csv
  for t in old newz new; do
    cd .gpu-lane/$t; date -u
    PYTHONPATH=/tmp/site:$PWD timeout 170 python3 scripts/h200-fast-profile.py --out "$OUT/p/$t" --compile --fuse "$F" --prompt-ids cached --skip-hardware --skip-profile
    echo "$t rc=$?"; cd ../..
  done
} 2>&1 | tee "$OUT/device-call-2.log"
tar -czf "$OUT/profiles-2.tar.gz" -C "$OUT/p" . && rm -rf "$OUT/p"
