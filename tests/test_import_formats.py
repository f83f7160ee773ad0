"""import-evidence in every layout system1-omni publishes: provenance-json, timings-csv, sha256sums, auto.

The fixtures (tests/published_layouts.py) follow each real layout with SYNTHETIC values. When
local copies of the real public artefacts exist (never committed), OPENJEV_PUBLISHED_COPIES
names their folder and the last test imports each of them too.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import published_layouts as layouts
import pytest
import yaml

from openjev_repro.audit.importer import detect_format, import_evidence
from openjev_repro.errors import EvidenceError, InputMismatch

ROOT = Path(__file__).resolve().parents[1]
MAKERS = {"timings-csv": layouts.timings_csv, "provenance-json": layouts.provenance_json,
          "sha256sums": layouts.sha256sums}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.mark.parametrize("fmt", sorted(MAKERS))
def test_auto_detects_each_layout_and_every_figure_reproduces(tmp_path, fmt):
    src = MAKERS[fmt](tmp_path / "review-20260107")
    assert detect_format(src) == fmt
    record = import_evidence(src, tmp_path / "run")
    counts = record["figure_counts"]
    assert record["format"] == fmt and counts["mismatch"] == 0 and counts["compared"] >= 12
    assert counts["exact"] > 0 and counts["exact"] + counts["within_rounding"] == counts["compared"]
    assert record["study"]["date"] in ("2026-01-06", "2026-01-05", "2026-01-07")
    assert record["study"]["hardware"] and record["signed"] is False
    proc = cli("verify", "--run", str(tmp_path / "run"))
    assert proc.returncode == 0 and "VERIFIED: 0 of 8 checks failed." in proc.stdout, proc.stdout + proc.stderr


def test_timings_csv_records_that_provenance_is_not_verifiable(tmp_path):
    src = layouts.timings_csv(tmp_path / "src")
    proc = cli("import-evidence", "--src", str(src), "--out", str(tmp_path / "run"), "--format", "auto")
    assert proc.returncode == 0, proc.stderr
    assert "provenance not verifiable: no published digests" in proc.stdout.splitlines()[0]
    record = json.loads((tmp_path / "run" / "import.json").read_text())
    assert record["provenance"] == "provenance not verifiable: no published digests"
    assert set(record["imported_files"]) == {"timings.csv", "summary.json"}
    assert "published gate single_mean: FAILED (single_mean_max_regression_percent: 2)" in proc.stdout
    # 2 arms x 2 workloads x 2 passes x 5 metrics, 4 reductions, 2 totals
    assert record["figure_counts"]["compared"] == 46
    (src / "timings.csv").write_text((src / "timings.csv").read_text().replace("0.0", "0.1", 1))
    changed = cli("verify", "--run", str(tmp_path / "run"), "--source", str(src))
    assert changed.returncode == 1 and "timings.csv differs from the sha256 recorded at import" in changed.stdout


def test_report_states_the_published_date_hardware_arms_and_gates(tmp_path):
    src = layouts.timings_csv(tmp_path / "src")
    import_evidence(src, tmp_path / "run")
    proc = cli("report", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "report.md").read_text()
    assert "- Study date (recipe): 2026-01-06" in text and "- Run: run, published 2026-01-06" in text
    assert "- Hardware: One SYNTHETIC-GPU, SM00, GPU-00000000-0000-0000-0000-000000000000" in text
    assert "| single_mean | **FAILED** | single_mean_max_regression_percent: 2 |" in text
    # a criterion with no published pass/fail shows the value they published for it, if any
    assert ("| maximum_probability_or_score_drift | not published | maximum_probability_or_score_drift: 0.001; "
            "published value maximum_drift: 0.0 |") in text
    assert "| decision_flips | not published | decision_flips: 0 |" in text
    assert "- Arm candidate:" in text and "hardware not recorded" not in text
    # latencies only: nothing failed, so the report says agreement and determinism were not assessed
    assert "Agreement and determinism: not assessed; the rows carry no probabilities" in text
    assert "failed or unpaired" not in text and "failed or missing requests" not in text


def test_plots_of_an_imported_run_say_imported_and_the_published_date(tmp_path):
    from openjev_repro.evidence.records import ImportRecord
    from openjev_repro.results.report import _title, imported_run_info

    class Fig:
        def suptitle(self, text, **_):
            self.text = text

    fig = Fig()
    info = imported_run_info("run", ImportRecord.from_json({
        "format_version": 2, "format": "x", "source": "s", "files_verified": 0, "rows": 0,
        "study": {"date": "2026-10-03", "hardware": ["hardware_name: H200"]}}))
    _title(fig, "imported-x", info, ["mixed"], "Latency")
    assert fig.text.startswith("Latency: IMPORTED evidence, not measured by us\n")
    assert "published 2026-10-03" in fig.text and "H200" in fig.text


def test_provenance_json_digest_mismatch_is_one_error_and_nothing_is_written(tmp_path):
    src = layouts.provenance_json(tmp_path / "src")
    raw = src / "raw-off-c1-p0.jsonl"
    raw.write_text(raw.read_text().replace('"status": 200', '"status": 201', 1))
    proc = cli("import-evidence", "--src", str(src), "--out", str(tmp_path / "run"))
    assert proc.returncode == 1 and not (tmp_path / "run").exists()
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith("error: ")
    assert "raw-off-c1-p0.jsonl: sha256 differs from provenance.json's" in proc.stderr


def test_provenance_json_unlisted_summary_is_recorded_not_verified(tmp_path):
    record = import_evidence(layouts.provenance_json(tmp_path / "review-20261006"), tmp_path / "run")
    assert record["provenance"] == "partly verified: summary.json not listed in provenance.json"
    assert record["study"]["date"] == "2026-10-06"  # from the folder's name: nothing else publishes one
    assert {g["name"]: g["outcome"] for g in record["published_gates"]} == {"parity off": True, "parity all": True}
    # off_div_all_median: "off" is the study's reference, so it is the run's first (baseline) arm
    recipe = yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text())
    assert [b["name"] for b in recipe["backends"]] == ["off", "all"]
    assert recipe["backends"][0]["description"].startswith("mode off of the published study (summary.json cache_off")


def test_sha256sums_checks_both_digest_levels(tmp_path):
    src = layouts.sha256sums(tmp_path / "src")
    record = import_evidence(src, tmp_path / "ok")
    assert record["source_manifest_meta"]["originals_verified"] == ["bench.jsonl", "bench.summary.json"]
    # A member rewritten and relisted in SHA256SUMS still differs from the uncompressed original's digest.
    rows = gzip.decompress((src / "bench.jsonl.gz").read_bytes()).replace(b'"sample": 0', b'"sample": 99', 1)
    (src / "bench.jsonl.gz").write_bytes(gzip.compress(rows, mtime=0))
    layouts.write_sums(src)
    with pytest.raises(InputMismatch, match="its uncompressed bench.jsonl differs from provenance.json's sha256"):
        import_evidence(src, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_sha256sums_refuses_an_unlisted_file_and_a_gzip_bomb(tmp_path, monkeypatch):
    src = layouts.sha256sums(tmp_path / "src")
    (src / "extra.txt").write_text("x")
    with pytest.raises(InputMismatch, match="extra.txt: present but not in SHA256SUMS"):
        import_evidence(src, tmp_path / "run")
    (src / "extra.txt").unlink()
    from openjev_repro.audit.imports import sha256sums
    monkeypatch.setattr(sha256sums, "MAX_MEMBER_BYTES", 100)
    with pytest.raises(EvidenceError, match="decompresses to over"):
        import_evidence(src, tmp_path / "run")


def test_unknown_layout_and_unknown_format_are_one_error_line(tmp_path):
    (tmp_path / "src").mkdir()
    proc = cli("import-evidence", "--src", str(tmp_path / "src"), "--out", str(tmp_path / "run"))
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "no known layout" in proc.stderr
    proc = cli("import-evidence", "--src", str(tmp_path / "src"), "--out", str(tmp_path / "run"), "--format", "xml")
    assert proc.returncode == 1 and "unknown --format 'xml'" in proc.stderr


# --- the real published files, when local copies exist (never committed) ----------------------

COPIES = Path(os.environ.get("OPENJEV_PUBLISHED_COPIES", ROOT / ".cache" / "published"))
REAL = {"gdn-20261003": "system1-omni", "jev_vl-review-20261006": "provenance-json",
        "prefill_batching-20261006": "timings-csv"}
# What each real report must state about the published study (its date, hardware, first arm, a gate)
# and how many of its figures the import compares.
REAL_FACTS = {
    "gdn-20261003": (23, ["- Run: run, published 2026-10-03",
                          "- Hardware: H200 (archived reported name NVIDIA L20X), GPU-cbf66259-f4ab-0ede-1811-82037dde5924",
                          "- Arm baseline: baseline arm of the published study", "| accepted_e2e_latency_gate | **FAILED** |"]),
    "jev_vl-review-20261006": (19, ["- Run: run, published 2026-10-06", "- Hardware: NVIDIA H800 80GB",
                                    "- all vs off: 2.79x by mean", "| parity off | passed | max_abs_dp 0.021545 <= tol 0.025 |"]),
    "prefill_batching-20261006": (90, ["- Run: run, published 2026-10-06",
                                       "- Hardware: One H200, SM90, 132 SMs; driver/scheduler label L20X",
                                       "- Arm candidate: arm candidate of the published study",
                                       "| multi_question | passed | multi_question_mean_reduction_percent: 15 |"]),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_published_layout_imports_with_auto(tmp_path, name):
    src = COPIES / name
    if not src.is_dir():
        pytest.skip(f"no local copy of the public {name} artefact at {src} (set OPENJEV_PUBLISHED_COPIES; "
                    "rebuild it with scripts/published-copies.sh or from the public text files, see docs/manifest.md; "
                    "never committed)")
    proc = cli("import-evidence", "--src", str(src), "--out", str(tmp_path / "run"), "--format", "auto")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "run" / "import.json").read_text())
    assert record["format"] == REAL[name] and record["figure_counts"]["mismatch"] == 0
    compared, lines = REAL_FACTS[name]
    assert record["figure_counts"]["compared"] == compared
    assert record["study"]["date"] and record["study"]["hardware"]
    report = cli("report", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "out"))
    text = (tmp_path / "out" / "report.md").read_text()
    assert report.returncode == 0 and "## Published study" in text
    assert [line for line in lines if line not in text] == []


def test_system1_omni_report_states_the_published_date_hardware_arms_and_failed_gate(tmp_path):
    import hashlib
    import shutil

    src = Path(shutil.copytree(ROOT / "tests" / "fixtures" / "system1" / "artifacts", tmp_path / "src"))
    plan = {"hypothesis": "SYNTHETIC: packing lowers latency", "independent_variable": "SYNTHETIC packing",
            "host": {"driver": "NVRM version: SYNTHETIC 0.0"},
            "fixed_controls": {"gpu_uuid": "GPU-00000000-1111-2222-3333-444444444444",
                               "hardware_name": "SYNTHETIC H200"},
            "libraries": {"baseline": "/srv/synthetic/base.so", "candidate": "/srv/synthetic/cand.so"},
            "acceptance": {"latency": "At least 2% reduction in aggregate mean latency.",
                           "fidelity": "Unchanged decisions."}}
    (src / "e2e" / "plan.json").write_text(json.dumps(plan, indent=2))
    manifest = json.loads((src / "manifest.json").read_text())
    data = (src / "e2e" / "plan.json").read_bytes()
    manifest["files"]["e2e/plan.json"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (src / "manifest.json").write_text(json.dumps(manifest, indent=2))
    record = import_evidence(src, tmp_path / "run")
    assert record["format"] == "system1-omni" and record["study"]["date"] == "2026-01-02"  # their date_utc
    assert "hardware_name: SYNTHETIC H200" in record["study"]["hardware"]
    gates = {g["name"]: g for g in record["published_gates"]}
    assert gates["accepted_e2e_latency_gate"]["outcome"] is False
    assert gates["accepted_e2e_latency_gate"]["criterion"] == "latency: At least 2% reduction in aggregate mean latency."
    assert gates["fidelity"]["outcome"] is None
    proc = cli("report", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "report.md").read_text()
    assert "- Study date (recipe): 2026-01-02" in text and "- Run: run, published 2026-01-02" in text
    assert "- Hardware: SYNTHETIC H200, GPU-00000000-1111-2222-3333-444444444444" in text
    assert ("| accepted_e2e_latency_gate | **FAILED** | latency: At least 2% reduction in aggregate mean latency. |"
            in text)
    assert "- Arm candidate: candidate arm of the published study (library /srv/synthetic/cand.so)" in text
    assert 'Hypothesis (quoted): "SYNTHETIC: packing lowers latency"' in text


@pytest.mark.parametrize("fmt, edit, message", [
    ("timings-csv", lambda src: (src / "timings.csv").write_text(
        (src / "timings.csv").read_text().replace(",1,", f",{2**70},", 1)), "decisions '1180591620717411303424' is not a non-negative integer"),
    ("timings-csv", lambda src: (src / "timings.csv").write_text(re.sub(
        r"^(single,[^,]*,1,)[^,]*", r"\1nan", (src / "timings.csv").read_text(), count=1, flags=re.MULTILINE)),
     "baseline_pass_1_s nan is not a finite number of seconds"),
    ("provenance-json", lambda src: (src / "summary.json").write_text('{"cache_off": NaN}'),
     "summary.json: holds NaN or Infinity"),
])
def test_hostile_values_in_the_other_layouts_are_one_error_line(tmp_path, fmt, edit, message):
    src = MAKERS[fmt](tmp_path / "src")
    edit(src)
    proc = cli("import-evidence", "--src", str(src), "--out", str(tmp_path / "run"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()


def test_provenance_summary_whose_passes_is_not_a_list_is_one_error_line(tmp_path):
    src = layouts.provenance_json(tmp_path / "src")
    summary = json.loads((src / "summary.json").read_text())
    mode = next(k for k, v in summary.items() if isinstance(v, dict) and "passes" in v)
    summary[mode]["passes"] = 3
    (src / "summary.json").write_text(json.dumps(summary))
    proc = cli("import-evidence", "--src", str(src), "--out", str(tmp_path / "run"), "--format", "auto")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        f"error: summary.json: {mode}.passes is 3, not a list of passes."], proc.stderr
    assert not (tmp_path / "run").exists()
