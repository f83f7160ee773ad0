#!/usr/bin/env bash
# One device call of issue 43: recipes/h200-packed-silu-27b-shape.yaml (the seed's packed-SiLU A/B on
# our backend, graph replay on in both configurations, 2 traced requests at each of 107, 936 and 3399
# tokens per configuration with the PyTorch profiler) through the runner on this host's GPU, signed
# with $KEY, then verified with $PUBKEY there. What comes back under $OUT (at most 8 files):
#   run.tar.gz        the run directory (its 12 traces are gzip'd under traces/, kernel-families.json)
#   study.log         the runner's output, the verify output, timestamps
#   nvidia-smi-after-run.txt
#   triton-fla.tar.gz the Triton cache the fast backends wrote (FLA's autotuned kernels)
# Run from the repository root with the fixture in .cache/demo (`invoke fixture --out .cache/demo`)
# and, in $WHEELS (default .whl), the wheels the H200 image lacks: this package's dependencies that
# scripts/h200-study-call.sh carried (invoke, msgspec, pydantic and its parts, ...) and the FLA 0.6.0
# wheels of ../shared/wheels. Estimated 5-6 minutes of study (STUDY_LIMIT, default 540 s).
set -u
WHEELS=${WHEELS:-.whl}
KEY=${KEY:?the signing key (private half)}
PUBKEY=${PUBKEY:-}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
mkdir -p .cache/triton-fla "$OUT/runs"
{
  echo "gpu $GPU"; date -u
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
  timeout "${STUDY_LIMIT:-540}" python3 -m invoke study --recipe recipes/h200-packed-silu-27b-shape.yaml \
      --out "$OUT/runs" --key "$KEY" --gpu-uuid "$GPU"
  echo "study rc=$?"; date -u
  for run in "$OUT"/runs/*/; do
    ls -la "$run/traces"
    if [ -n "$PUBKEY" ]; then python3 -m invoke verify --run "$run" --pubkey "$PUBKEY"; echo "verify rc=$?"; fi
  done
} 2>&1 | tee "$OUT/study.log"
nvidia-smi > "$OUT/nvidia-smi-after-run.txt" 2>&1
tar -czf "$OUT/run.tar.gz" -C "$OUT/runs" . && rm -rf "$OUT/runs"
tar -czf "$OUT/triton-fla.tar.gz" -C .cache triton-fla
ls -la "$OUT"
