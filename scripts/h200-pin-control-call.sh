#!/usr/bin/env bash
# One device call for the control of docs/rerun-h200.md "Pinning FLA's autotuned kernels across hosts":
# on one fresh H200 host, first the fast eager FLA backend with an EMPTY Triton cache
# (recipes/h200-fast-27b-shape-unpinned.yaml: FLA autotunes anew), then the same backend with host A's
# cache pinned (recipes/h200-fast-27b-shape-pinned.yaml), both through the runner, unsigned. Both runs come
# back as tarballs; compare each with host A's signed run. Run from a copy of the repository with the
# fixture in .cache/demo and host A's cache tarball in .cache.
set -u
WHEELS=${WHEELS:-../whl}
CACHE_TAR=${CACHE_TAR:-.cache/triton-fla-2026-12-02.tar.gz}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
rm -rf .cache/triton-fla .cache/triton-fla-fresh && mkdir -p .cache/triton-fla-fresh "$OUT/unpinned" "$OUT/pinned"
tar -xzf "$CACHE_TAR" -C .cache || exit 1
{
  echo "gpu $GPU"; date -u
  timeout "${UNPINNED_LIMIT:-170}" python3 -m invoke study --recipe recipes/h200-fast-27b-shape-unpinned.yaml \
      --out "$OUT/unpinned" --gpu-uuid "$GPU"
  echo "unpinned study rc=$?"; date -u
  python3 -m invoke environment --tree-digest .cache/triton-fla-fresh
  timeout "${PINNED_LIMIT:-130}" python3 -m invoke study --recipe recipes/h200-fast-27b-shape-pinned.yaml \
      --out "$OUT/pinned" --gpu-uuid "$GPU"
  echo "pinned study rc=$?"; date -u
} 2>&1 | tee "$OUT/study.log"
nvidia-smi > "$OUT/nvidia-smi-after-run.txt" 2>&1
for kind in unpinned pinned; do tar -czf "$OUT/$kind.tar.gz" -C "$OUT/$kind" . && rm -rf "${OUT:?}/$kind"; done
tar -czf "$OUT/triton-fla-fresh.tar.gz" -C .cache triton-fla-fresh
ls -la "$OUT"
