"""The committed H200 results still verify: signature, digests and every recomputed statistic."""

import json
from pathlib import Path

import pytest

from openjev_repro.audit import verify_path
from openjev_repro.audit.compare import compare_runs
from openjev_repro.evidence.recipe import read_yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results" / "h200-reference-27b-shape"
TOLERANCES = Path(__file__).resolve().parents[1] / "manifests" / "tolerances" / "h200-reference-rerun.yaml"


@pytest.mark.parametrize("name", ["run", "rerun"])
def test_committed_h200_run_verifies(name):
    checks = verify_path(RESULTS / name, pubkey=RESULTS / "signing-key.pub")
    failed = [c for c in checks if c.passed is False]
    assert not failed, failed
    assert any(c.name == "statistics recomputed" and c.passed for c in checks)


def test_committed_rerun_is_within_declared_tolerances():
    """The README's cross-host claim: same weights, bit-identical probabilities, PASS verdict."""
    tolerances = read_yaml(TOLERANCES, "tolerances")
    result = compare_runs(RESULTS / "run", RESULTS / "rerun", tolerances=tolerances).to_json()
    assert result["verdict"]["passed"] is True, result["verdict"]["failures"]
    assert len(result["pairs"]) == 3
    for pair in result["pairs"]:
        assert pair["weights_fingerprint"]["same"] is True
        assert pair["answers"]["max_abs_probability_delta"] == 0.0
        assert not pair["answers"]["decision_flips"]


FAST = Path(__file__).resolve().parents[1] / "results" / "h200-fast-27b-shape"


def test_committed_fast_study_verifies_and_its_report_has_the_floor():
    """The first fast study (issue 18, now run-2026-12-01/) verifies with its key; its signed report states the floor ratios."""
    checks = verify_path(FAST / "run-2026-12-01", pubkey=FAST / "signing-key-2026-12-01.pub")
    failed = [c for c in checks if c.passed is False]
    assert not failed, failed
    report = (FAST / "run-2026-12-01" / "report.md").read_text()
    assert "## Hardware floor" in report and "766.0 TFLOP/s" in report and "4.244 TB/s" in report
    assert "| reference-fast-graph64 | 148 | 67.22 | 29.95 | 2.24× |" in report


def _verified_report(run: str, key: str) -> str:
    """The run's signed report, after `verify` passed every check with that key."""
    checks = verify_path(FAST / run, pubkey=FAST / key)
    failed = [c for c in checks if c.passed is False]
    assert not failed, failed
    return (FAST / run / "report.md").read_text()


def test_committed_fast_study_2026_12_02_verifies_and_passes_the_decision_rule():
    """The first signed study of issue 28 (now run-2026-12-02/) verifies with its key; all its gates passed."""
    report = _verified_report("run-2026-12-02", "signing-key-2026-12-02.pub")
    assert "| reference-fast-best | 148 | 50.56 | 30.40 | 1.66× |" in report
    assert "| best-decisions-match-raw | decisions_unchanged | PASSED |" in report
    assert "| best-probability-delta-vs-raw | max_probability_delta | PASSED |" in report
    assert "FAILED" not in report


def test_committed_fast_study_on_upstreams_contract_verifies_and_reports_its_failed_gate():
    """The first signed study of upstream's contract (now run-2026-12-02c/) verifies with its key; its report gives
    the floor ratios, and the decision rule's max |dp| gate FAILED (0.02195 > 0.0204) while the decisions gate
    passed, as the results README says."""
    report = _verified_report("run-2026-12-02c", "signing-key-2026-12-02c.pub")
    assert "| reference-fast-best | 148 | 49.07 | 29.93 | 1.64× |" in report
    assert "| best-decisions-match-raw | decisions_unchanged | PASSED |" in report
    assert "| best-probability-delta-vs-raw | max_probability_delta | FAILED | max \\|p(reference-raw) - " in report
    assert report.count("| FAILED |") == 1


def test_committed_fast_study_with_the_fp32_gate_meets_the_mean_target_and_the_decision_rule():
    """The signed study of upstream's contract with silu-mul-fp32 (now run-2026-12-02d/) verifies with its key; the
    best configuration's mean is under the published native's 48.5 ms, and every gate passed, the decision rule's
    two (max |dp| 0.01911 <= 0.0204; decisions where the raw margin exceeds 0.0204) among them."""
    report = _verified_report("run-2026-12-02d", "signing-key-2026-12-02d.pub")
    assert "| reference-fast-best | 148 | 47.67 | 29.62 | 1.61× | 25.36 | 11.97 | 2.12× |" in report
    assert "max \\|p(reference-raw) - p(reference-fast-best)\\| = 0.01911 over 74 pairs (allowed <= 0.0204)" in report
    assert "| best-decisions-match-raw | decisions_unchanged | PASSED |" in report
    assert "| mixed | reference-fast-best | **overall** | 148 | 4887.66 | **33.025** |" in report
    assert "silu-mul-fp32" in report and "FAILED" not in report


def test_committed_fast_rerun_on_a_second_host_passes_every_gate_and_differs_only_in_the_best():
    """The same recipe on a second H200 with an empty Triton cache (rerun-2026-12-02d/): every gate passed; raw and
    fast eager are bit-identical to run-2026-12-02d/, the best configuration moved by at most 0.0078 with no decision
    flipped."""
    report = _verified_report("rerun-2026-12-02d", "signing-key-2026-12-02d.pub")
    assert "| reference-fast-best | 148 | 47.06 | 29.50 | 1.60× | 24.88 | 11.94 | 2.08× |" in report
    assert "FAILED" not in report
    result = compare_runs(FAST / "run-2026-12-02d", FAST / "rerun-2026-12-02d").to_json()
    deltas = {pair["candidate_backend"]: pair["answers"] for pair in result["pairs"]}
    assert deltas["reference-raw"]["max_abs_probability_delta"] == 0.0
    assert deltas["reference-fast-eager"]["max_abs_probability_delta"] == 0.0
    assert 0.0 < deltas["reference-fast-best"]["max_abs_probability_delta"] < 0.0078
    assert not any(answers["decision_flips"] for answers in deltas.values())


def test_committed_fast_study_with_pinned_kernel_caches_passes_every_gate_and_kept_its_caches():
    """The signed study with both kernel caches pinned (run/, 2026-12-04, issue 39): 14 checks pass with its key,
    all eight gates passed, every pinned cache is unchanged in kernel_caches.json and the report says so."""
    report = _verified_report("run", "signing-key.pub")
    assert "| reference-fast-best | 148 | 48.743 | 48.854 / 48.633 | 25.518 / 25.625 |" in report
    assert "max \\|p(reference-raw) - p(reference-fast-best)\\| = 0.01649 over 74 pairs (allowed <= 0.0204)" in report
    assert "| reference-fast-best | 64 | 21.027 |" in report and "FAILED" not in report
    record = json.loads((FAST / "run" / "kernel_caches.json").read_text())
    caches = [c for backend in record["backends"].values() for c in backend]
    assert len(caches) == 4 and all(c["archive"].startswith("results/h200-fast-27b-shape/kernel-caches/") for c in caches)
    assert all(c["before"] == c["after"] for c in caches)
    rendered = (REPO / "tests" / "fixtures" / "rendered" / "h200-fast-27b-shape--run.md").read_text()
    assert "Every pinned cache (4) was unchanged after its backend stopped" in rendered


def test_committed_fast_rerun_on_host_b_stopped_because_a_pinned_cache_changed_with_the_same_answers():
    """The rerun on a second H200 (rerun-host-b-incomplete/, 2026-12-04) stopped on drift: the pinned fast-eager
    Triton cache kept its 887 files but not its digest. It is incomplete and never verifies; raw's and fast eager's
    answers that it recorded are the same as run/'s, and so are fast eager's autotune choices."""
    rerun = FAST / "rerun-host-b-incomplete"
    assert json.loads((rerun / "state.json").read_text())["status"] == "incomplete"
    assert [c.name for c in verify_path(rerun, pubkey=FAST / "signing-key.pub") if c.passed is False]
    after = json.loads((rerun / "kernel_caches.json").read_text())["backends"]["reference-fast-eager"][0]
    assert (after["before"]["files"], after["after"]["files"]) == (887, 887) and after["before"] != after["after"]

    def answers(run: Path, backend: str) -> dict:
        lines = (run / "responses" / f"{backend}.jsonl").read_text().splitlines()
        entries = map(json.loads, lines)  # a body is the answer's JSON text, as the server sent it
        return {(e["workload"], e["phase"], e["pass_index"], e["id"], e["seq"]): json.loads(e["body"])["answers"]
                for e in entries}

    for backend in ("reference-raw", "reference-fast-eager"):
        ours, theirs = answers(FAST / "run", backend), answers(rerun, backend)
        assert len(theirs) == 325 and all(ours[k] == theirs[k] for k in theirs), backend
    health = [json.loads((run / "logs" / "reference-fast-eager.health-after.json").read_text())
              for run in (FAST / "run", rerun)]
    assert health[0]["runtime_identity"]["autotune"] == health[1]["runtime_identity"]["autotune"]


def test_committed_fast_rerun_from_the_pinned_caches_is_bit_identical_in_every_backend():
    """rerun/ (2026-12-05, a fresh H200, issue 39): the recipe's pinned caches unpacked location-free. It verifies
    with run/'s key; every answer of every backend (raw, fast eager, the compiled best) equals run/'s; fast eager's
    caches stayed unchanged; the best configuration's Triton cache gained kernel variants (32 files added, none
    rewritten or removed), as its report says, while its Inductor cache stayed unchanged."""
    report = _verified_report("rerun", "signing-key.pub")
    assert "FAILED" not in report
    result = compare_runs(FAST / "run", FAST / "rerun").to_json()
    deltas = {(p["workload"], p["candidate_backend"]): p["answers"] for p in result["pairs"]}
    assert len(deltas) == 6
    assert all(a["max_abs_probability_delta"] == 0.0 and not a["decision_flips"] for a in deltas.values())
    caches = {(name, c["kind"]): c for name, backend in
              json.loads((FAST / "rerun" / "kernel_caches.json").read_text())["backends"].items() for c in backend}
    assert all(c["before"]["paths"] == "relative" for c in caches.values())
    unchanged = [k for k, c in caches.items() if c["before"] == c["after"]]
    assert sorted(unchanged) == [("reference-fast-best", "inductor"), ("reference-fast-eager", "inductor"),
                                 ("reference-fast-eager", "triton")]
    best = caches["reference-fast-best", "triton"]["changes"]
    assert (best["added"], best["rewritten"], best["removed"]) == (32, 0, 0)
    assert "| 600 / 632 |" in report and "**CHANGED**: 0 rewritten, 32 added, 0 removed" in report


def test_committed_pinned_best_on_a_third_host_is_not_bit_identical_and_says_its_cache_changed():
    """The best configuration with run-2026-12-02d/'s Triton cache pinned on a third host (pinned-best-host-d/, unsigned):
    its evidence checks pass; the cache did not stay unchanged (a kernel compiled or autotuned anew there) and the
    probabilities moved by 0.0107 with no decision flipped, as the results README says."""
    run = FAST / "pinned-best-host-d" / "run"
    checks = verify_path(run, allow_unsigned=True)
    assert [c.name for c in checks if c.passed is False] == []
    check = json.loads((run / "environment_check.json").read_text())
    assert check["triton_cache"]["reference-fast-best"]["unchanged"] is False
    pair = compare_runs(FAST / "run-2026-12-02d", run).to_json()["pairs"][0]
    assert pair["candidate_backend"] == "reference-fast-best" and not pair["answers"]["decision_flips"]
    assert 0.0106 < pair["answers"]["max_abs_probability_delta"] < 0.0108
