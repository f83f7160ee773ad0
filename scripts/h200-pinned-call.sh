#!/usr/bin/env bash
# One device call for steps 2-4 of docs/rerun-h200.md "Pinning FLA's autotuned kernels across hosts":
# on a second H200 host (host B), unpack host A's FLA Triton cache (the signed study of 2026-12-02) at
# .cache/triton-fla, the directory recipes/h200-fast-27b-shape-pinned.yaml declares with its tree
# digest, and run that recipe (the fast eager backend alone) through the runner, unsigned. The run
# comes back as one tarball; environment_check.json in it says whether the cache stayed unchanged.
# Run from a copy of the repository with the fixture in .cache/demo and the cache tarball in .cache.
set -u
WHEELS=${WHEELS:-../whl}
CACHE_TAR=${CACHE_TAR:-.cache/triton-fla-2026-12-02.tar.gz}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
rm -rf .cache/triton-fla && tar -xzf "$CACHE_TAR" -C .cache || exit 1
mkdir -p "$OUT/runs"
{
  echo "gpu $GPU"; date -u
  sha256sum "$CACHE_TAR"
  python3 -m invoke environment --tree-digest .cache/triton-fla
  timeout "${STUDY_LIMIT:-380}" python3 -m invoke study --recipe "${RECIPE:-recipes/h200-fast-27b-shape-pinned.yaml}" \
      --out "$OUT/runs" --gpu-uuid "$GPU"
  echo "study rc=$?"; date -u
} 2>&1 | tee "$OUT/study.log"
nvidia-smi > "$OUT/nvidia-smi-after-run.txt" 2>&1
tar -czf "$OUT/run.tar.gz" -C "$OUT/runs" . && rm -rf "$OUT/runs"
ls -la "$OUT"
