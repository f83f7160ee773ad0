"""The committed H200 results still verify: signature, digests and every recomputed statistic."""

from pathlib import Path

from openjev_repro.audit import verify_path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "h200-reference-27b-shape"


def test_committed_h200_run_verifies():
    checks = verify_path(RESULTS / "run", pubkey=RESULTS / "signing-key.pub")
    failed = [c for c in checks if c.passed is False]
    assert not failed, failed
    assert any(c.name == "statistics recomputed" and c.passed for c in checks)
