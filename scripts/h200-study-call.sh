#!/usr/bin/env bash
# One device call of issue 28's signed study (2026-12-02): recipes/h200-fast-27b-shape.yaml through
# the runner on this host's GPU, signed with $KEY; the run comes back as one tarball, with the
# fast backends' Triton cache (FLA's autotuned kernels; docs/rerun-h200.md, pinning) and the GPU
# state after the run. Run from a copy of the repository with the fixture in .cache/demo.
set -u
WHEELS=${WHEELS:-../whl}
KEY=${KEY:?the signing key (private half)}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
mkdir -p .cache/triton-fla "$OUT/runs"
{
  echo "gpu $GPU"; date -u
  timeout "${STUDY_LIMIT:-560}" python3 -m invoke study --recipe recipes/h200-fast-27b-shape.yaml --out "$OUT/runs" \
      --key "$KEY" --gpu-uuid "$GPU"
  echo "study rc=$?"; date -u
} 2>&1 | tee "$OUT/study.log"
nvidia-smi > "$OUT/nvidia-smi-after-run.txt" 2>&1
tar -czf "$OUT/run.tar.gz" -C "$OUT/runs" . && rm -rf "$OUT/runs"
tar -czf "$OUT/triton-fla.tar.gz" -C .cache triton-fla
ls -la "$OUT"
