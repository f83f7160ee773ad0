"""`import-evidence --format system1-omni` on synthetic evidence laid out like the native project's.

`fixtures/system1/artifacts` follows the real `benchmarks/gdn/artifacts/<date>/` layout
(nested manifest objects with source, sha256, bytes, source_sha256 and a normalization note;
`e2e/` and `kernel/` subfolders; a partial download) with synthetic values
(make_layout.py). `fixtures/system1/evidence` is the older flat layout with a list manifest.
The last test runs on a local copy of the real published files when one is present.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from invoking import invoke

from openjev_repro.audit.figures import NotReproduced
from openjev_repro.audit.importer import classify, half_unit, import_system1
from openjev_repro.errors import EvidenceError, InputMismatch, RunIncomplete
from openjev_repro.evidence.rows import read_rows
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.manifest import write_manifest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(__file__).parent / "fixtures" / "system1" / "artifacts"
FLAT = Path(__file__).parent / "fixtures" / "system1" / "evidence"
REAL = ROOT / ".cache" / "system1-omni-20261003"
ABSENT = ["flashinfer/results.jsonl", "kernel/plan.json", "rejected-variants.json"]


def copy(tmp_path: Path, source: Path = ARTIFACTS) -> Path:
    return Path(shutil.copytree(source, tmp_path / "src"))


def relist(src: Path, *names: str) -> None:
    """Rewrite their manifest entries of `names` after a deliberate edit (a consistent but bad source)."""
    manifest = json.loads((src / "manifest.json").read_text())
    for name in names:
        data = (src / name).read_bytes()
        manifest["files"][name].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (src / "manifest.json").write_text(json.dumps(manifest, indent=2))


def cli(*args: str) -> subprocess.CompletedProcess:
    return invoke(*args, cwd=ROOT)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


# --- the real layout ------------------------------------------------------------------------


def test_import_from_the_root_finds_e2e_and_records_the_partial_download(tmp_path):
    report = import_system1(ARTIFACTS, tmp_path / "run")
    run = RunDir.open(tmp_path / "run")
    assert run.state_record().status == "imported" and report["signed"] is False and report["measured_by_us"] is False
    assert report["evidence_folder"] == "e2e" and report["absent"] == ABSENT and report["files_verified"] == 9
    entry = report["source_manifest"]["kernel/analysis/recurrent-reference.log"]
    assert set(entry) == {"source", "sha256", "bytes", "source_sha256", "normalization"}
    assert report["normalization"] == [{"path": "kernel/analysis/recurrent-reference.log", "present": True,
                                        "note": entry["normalization"]}]
    assert report["source_manifest_meta"]["date_utc"] == "2026-01-02"
    assert "build_and_check_records" in report["source_manifest_meta"]
    rows = read_rows(run.rows_path)
    assert len(rows) == report["rows"] == 24 and {r.backend for r in rows} == {"baseline", "candidate"}
    assert all(r.label is None and r.error is None for r in rows)  # their checks carry no `correct`
    first = rows[0]
    assert (first.id, first.latency_ns, first.input_tokens) == ("syn-policy-01", 18_712_443, 96)
    body = json.loads(run.responses_path("baseline").read_text().splitlines()[0])["body"]
    assert hashlib.sha256(body.encode()).hexdigest() == first.body_sha256
    counts = report["figure_counts"]
    assert (counts["compared"], counts["exact"], counts["within_rounding"], counts["mismatch"]) == (23, 17, 6, 0)
    figures = {(f["arm"], f["pass"], f["figure"]): f for f in report["figures"]}
    p95 = figures[("baseline", 1, "p95_ms")]
    assert p95["status"] == "within_rounding" and p95["rule"] == "nearest_rank" and 0 < p95["difference"] < 1e-13
    assert figures[("candidate", 1, "mean_ms")]["status"] == "exact"
    assert figures[("candidate vs baseline", None, "aggregate_reduction_percent")]["status"] == "within_rounding"
    assert report["cleanup"]["consistent"] is True and report["cleanup"]["summary"]["all_task_processes_exited"]
    assert leftovers(tmp_path) == ["run"]  # no temporary directory left beside it


def test_src_may_be_the_evidence_subfolder_or_name_it_with_subdir(tmp_path):
    below = import_system1(ARTIFACTS / "e2e", tmp_path / "a")
    named = import_system1(ARTIFACTS, tmp_path / "b", subdir="e2e")
    for report in (below, named):
        assert report["source"] == str(ARTIFACTS.resolve()) and report["evidence_folder"] == "e2e"
        assert report["absent"] == ABSENT and report["figure_counts"]["mismatch"] == 0
    with pytest.raises(InputMismatch, match="holds no verified <arm>-measured-<pass>.jsonl"):
        import_system1(ARTIFACTS, tmp_path / "c", subdir="kernel")
    with pytest.raises(InputMismatch, match="must be a folder inside"):
        import_system1(ARTIFACTS, tmp_path / "d", subdir="../evidence")
    assert leftovers(tmp_path) == ["a", "b"]


def test_manifest_entries_may_be_plain_digest_strings(tmp_path):
    src = copy(tmp_path)
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["files"] = {name: entry["sha256"] for name, entry in manifest["files"].items()}
    (src / "manifest.json").write_text(json.dumps(manifest))
    assert import_system1(src, tmp_path / "run")["figure_counts"]["mismatch"] == 0


def test_cli_prints_what_was_not_verified_and_how_each_figure_reproduces(tmp_path):
    proc = cli("import-evidence", "--format", "system1-omni", "--src", str(ARTIFACTS), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    for name in ABSENT:
        assert f"{name}: not present, not verified" in proc.stdout
    assert "normalization note, kernel/analysis/recurrent-reference.log (verified): Trailing blank" in proc.stdout
    assert "WITHIN baseline pass 1            p95_ms" in proc.stdout
    assert "23 of 23 published figures reproduce: 17 exact, 6 within rounding (" in proc.stdout
    assert "largest difference 2.8e-14), 0 mismatch." in proc.stdout
    assert "published cleanup: all task processes exited: True; 2 processes (return codes -15, 0)" in proc.stdout


def _flip_byte(src: Path, name: str) -> None:
    path = src / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _wrong_bytes(src: Path, name: str) -> None:
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["files"][name]["bytes"] += 1
    (src / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, message", [
    (lambda s: _flip_byte(s, "e2e/candidate-measured-2.jsonl"),
     r"e2e/candidate-measured-2.jsonl: sha256 \w+… differs from the manifest's"),
    (lambda s: _flip_byte(s, "e2e/summary.json"), r"e2e/summary.json: sha256 \w+… differs"),
    (lambda s: _flip_byte(s, "kernel/analysis/recurrent-reference.log"),
     "kernel/analysis/recurrent-reference.log: sha256"),
    (lambda s: (s / "e2e" / "notes.txt").write_text("mine\n"), "e2e/notes.txt: present but not in manifest.json"),
    (lambda s: (s / "flashinfer").mkdir() or (s / "flashinfer" / "extra.jsonl").write_text("{}\n"),
     "flashinfer/extra.jsonl: present but not in manifest.json"),
    (lambda s: _wrong_bytes(s, "e2e/baseline-measured-1.jsonl"),
     r"e2e/baseline-measured-1.jsonl: \d+ bytes, the manifest says \d+"),
])
def test_damage_is_one_error_line_and_nothing_is_written(tmp_path, damage, message):
    src = copy(tmp_path)
    damage(src)
    out = tmp_path / "out" / "run"
    for start in (src, src / "e2e"):
        proc = cli("import-evidence", "--src", str(start), "--out", str(out))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert "Traceback" not in proc.stderr
        assert re.search(message, lines[0]) and "Nothing was imported" in lines[0]
        assert leftovers(tmp_path / "out") == []


def _rewrite_row(src: Path, name: str, number: int, change) -> None:
    path = src / name
    lines = path.read_text().splitlines()
    lines[number - 1] = change(lines[number - 1])
    path.write_text("\n".join(lines) + "\n")
    relist(src, name)


def _field(key, value):
    def change(line):
        obj = json.loads(line)
        if value is KeyError:
            del obj[key]
        else:
            obj[key] = value
        return json.dumps(obj)
    return change


@pytest.mark.parametrize("change, message", [
    (_field("probability_yes", 1.5), "probability_yes 1.5 is not a number in"),
    (_field("probability_yes", True), "probability_yes True is not a number"),
    (_field("client_end_monotonic_ns", 5), "client_end_monotonic_ns 5 is before"),
    (_field("client_start_monotonic_ns", 1.5e12), "are not integers in [0, 2**63)"),
    (_field("id", ""), "id '' is not a non-empty string"),
    (_field("id", "syn-policy-01"), "duplicate case id syn-policy-01"),
    (_field("id", KeyError), "lacks id"),
    (_field("predicted", "maybe"), "predicted 'maybe' is not"),
    (_field("checks", {"usage": "yes"}), "checks is not an object of booleans"),
    (_field("raw", {"usage": {"input_tokens": -3}}), "input_tokens -3 is not an integer in [0, 2147483647]"),
    (_field("latency_s", float("nan")), "latency_s nan is not a finite number"),
    (lambda line: "[1, 2]", "a row is list, not a JSON object"),
    (lambda line: line[:40], "not JSON"),
    (lambda line: "", "empty line"),
    (_field("raw", {"usage": {"input_tokens": 3}, "x": float("inf")}), "raw holds NaN or Infinity"),
    (lambda line: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_malformed_row_is_one_error_line_naming_it(tmp_path, change, message):
    src = copy(tmp_path)
    _rewrite_row(src, "e2e/candidate-measured-2.jsonl", 2, change)  # the last file read: rows were being written
    proc = cli("import-evidence", "--src", str(src), "--out", str(tmp_path / "out" / "run"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: e2e/candidate-measured-2.jsonl:2: ") and message in lines[0], lines[0]
    assert leftovers(tmp_path / "out") == []  # no half-written run, nothing left "importing"


def test_a_pass_with_other_case_ids_is_refused(tmp_path):
    src = copy(tmp_path)
    _rewrite_row(src, "e2e/baseline-measured-2.jsonl", 6, _field("id", "syn-other"))
    with pytest.raises(EvidenceError, match="differ from the arm's first pass .missing syn-long-02; extra syn-other"):
        import_system1(src, tmp_path / "run")
    assert leftovers(tmp_path) == ["src"]


def test_absent_summary_out_inside_the_source_and_existing_out_are_refused(tmp_path):
    src = copy(tmp_path)
    (src / "e2e" / "summary.json").unlink()
    with pytest.raises(InputMismatch, match="e2e/summary.json: not present"):
        import_system1(src, tmp_path / "run")
    with pytest.raises(EvidenceError, match="is inside the source"):
        import_system1(ARTIFACTS, ARTIFACTS / "e2e" / "run")
    (tmp_path / "taken").mkdir()
    proc = cli("import-evidence", "--src", str(ARTIFACTS), "--out", str(tmp_path / "taken"))
    assert proc.returncode == 1 and "already exists" in proc.stderr
    (tmp_path / "file").write_text("not a folder\n")
    blocked = cli("import-evidence", "--src", str(ARTIFACTS), "--out", str(tmp_path / "file" / "run"))
    assert blocked.returncode == 1 and blocked.stderr.startswith("error: cannot create ")
    assert "Traceback" not in blocked.stderr
    missing = cli("import-evidence", "--src", str(ARTIFACTS))
    assert missing.returncode == 1 and missing.stderr.startswith("error: --out is required") and len(missing.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("edit, message", [
    (lambda summary: summary["arms"]["baseline"]["passes"][0].update(mean_ms=float("nan")), "holds NaN or Infinity"),
    (lambda summary: summary["arms"]["baseline"].update(passes={"pass": 1}),
     "arm 'baseline': Expected `array`, got `object` - at `$.passes`"),
    (lambda summary: summary["arms"]["baseline"]["passes"].append("two"),
     "arm 'baseline': Expected `object`, got `str` - at `$.passes[2]`"),
    (lambda summary: summary.update(arms=["baseline"]), "arms is not an object"),
])
def test_malformed_published_summary_is_one_error_line(tmp_path, edit, message):
    src = copy(tmp_path)
    summary = json.loads((src / "e2e" / "summary.json").read_text())
    edit(summary)
    (src / "e2e" / "summary.json").write_text(json.dumps(summary))
    relist(src, "e2e/summary.json")
    proc = cli("import-evidence", "--src", str(src), "--out", str(tmp_path / "out" / "run"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and leftovers(tmp_path / "out") == []


def test_published_figure_that_does_not_reproduce_is_a_mismatch(tmp_path):
    src = copy(tmp_path)
    summary = json.loads((src / "e2e" / "summary.json").read_text())
    summary["arms"]["candidate"]["passes"][0]["mean_ms"] += 0.001
    summary["arms"]["baseline"]["passes"][1]["requests"] = 5
    (src / "e2e" / "summary.json").write_text(json.dumps(summary, indent=2))
    relist(src, "e2e/summary.json")
    with pytest.raises(NotReproduced) as raised:
        import_system1(src, tmp_path / "run")
    bad = sorted((f.arm, f.pass_index, f.figure) for f in raised.value.mismatched)
    assert bad == [("baseline", 2, "requests"), ("candidate", 1, "mean_ms")]
    assert not (tmp_path / "run").exists()  # a figure that does not reproduce: no run is written


def test_half_unit_counts_at_most_fifteen_significant_digits():
    assert half_unit(227.70445899999999) == pytest.approx(5e-13)  # 227.704459000000 at 15 digits
    assert half_unit(48.375) == pytest.approx(5e-4)
    assert half_unit(74) == 0.5
    assert classify(227.704459, 227.70445899999999).status == "within_rounding"
    assert classify(227.70446, 227.70445899999999).status == "mismatch"
    assert classify(48.375, 48.375).status == "exact"
    assert classify(73, 74).status == "mismatch"  # counts reproduce exactly or not at all


# --- imported runs in the other tools --------------------------------------------------------


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    path = tmp_path_factory.mktemp("imported") / "run"
    import_system1(ARTIFACTS, path)
    return path


def test_report_renders_an_imported_run(imported, tmp_path):
    proc = cli("report", "--run", str(imported), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "not measured by us" in proc.stdout and "INCOMPLETE" not in proc.stdout + proc.stderr
    assert "n/a (no labels)" in proc.stdout and "Correct 0 / 0" not in proc.stdout
    assert "WITHIN candidate vs baseline all  aggregate_reduction_percent" in proc.stdout
    assert "Listed in their manifest but not present, not verified: flashinfer/results.jsonl" in proc.stdout
    assert "published cleanup: all task processes exited: True" in proc.stdout


def test_verify_checks_an_imported_run_without_a_signature(imported, tmp_path):
    plain = cli("verify", "--run", str(imported))
    assert plain.returncode == 0 and "N/A   source files" in plain.stdout and "--source DIR" in plain.stdout
    proc = cli("verify", "--run", str(imported), "--source", str(ARTIFACTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "N/A   signature" in proc.stdout and "no signature is required" in proc.stdout
    for name in ("converted files", "source files", "statistics recomputed", "published figures"):
        assert f"PASS  {name}" in proc.stdout
    assert "VERIFIED: 0 of 8 checks failed." in proc.stdout
    keyed = cli("verify", "--run", str(imported), "--pubkey", str(tmp_path / "any.pub"))
    assert keyed.returncode == 1 and "FAIL  signature" in keyed.stdout and "imported run" in keyed.stdout
    run = Path(shutil.copytree(imported, tmp_path / "copy"))
    rows = run / "rows.jsonl"
    rows.write_bytes(rows.read_bytes().replace(b'"seq": 0', b'"seq": 9', 1))
    record = json.loads((run / "import.json").read_text())
    record["figures"][0]["ours"] = 1.0
    (run / "import.json").write_text(json.dumps(record))
    bad = cli("verify", "--run", str(run))
    assert bad.returncode == 1
    assert "FAIL  converted files" in bad.stdout and "rows.jsonl has a different sha256" in bad.stdout
    assert "FAIL  published figures" in bad.stdout


def test_imported_run_is_never_signed(imported):
    with pytest.raises(RunIncomplete, match="'imported'"):
        write_manifest(imported, key_path=None)


def test_compare_pairs_only_the_requested_arms(imported, tmp_path):
    tol = tmp_path / "tol.yaml"
    tol.write_text("format_version: 1\nbackends: {baseline: candidate}\n")
    proc = cli("compare", "--baseline", str(imported), "--candidate", str(imported), "--tolerances", str(tol),
               "--out", str(tmp_path / "cmp.json"))
    result = json.loads((tmp_path / "cmp.json").read_text())
    assert [(p["baseline_backend"], p["candidate_backend"]) for p in result["pairs"]] == [("baseline", "candidate")]
    assert "candidate (baseline) vs candidate" not in proc.stdout and proc.returncode == 0
    published = result["pairs"][0]["published"]["aggregate_reduction_percent"]
    assert published["status"] == "within_rounding" and published["ours"] == pytest.approx(published["published"])
    assert "published aggregate_reduction_percent (imported run): " in proc.stdout


# --- the older flat layout ------------------------------------------------------------------


def test_flat_layout_with_a_list_manifest_still_imports(tmp_path):
    with pytest.raises(NotReproduced) as raised:  # the fixture publishes one figure that does not reproduce
        import_system1(FLAT, tmp_path / "run")
    figures = {(f.arm, f.pass_index, f.figure): f for f in raised.value.figures}
    assert [k for k, f in figures.items() if f.status == "mismatch"] == [("fast", 2, "mean_ms")]
    assert figures[("native", 1, "p95_ms")].rule == "jevbench"
    assert figures[("fast", 1, "p95_ms")].rule == "nearest_rank"
    src = Path(shutil.copytree(FLAT, tmp_path / "src"))  # that figure published as recomputed
    summary = json.loads((src / "summary.json").read_text())
    summary["arms"]["fast"]["passes"][1]["mean_ms"] = figures[("fast", 2, "mean_ms")].ours
    (src / "summary.json").write_text(json.dumps(summary, indent=2))
    manifest = json.loads((src / "manifest.json").read_text())
    for entry in manifest["files"]:
        entry["sha256"] = hashlib.sha256((src / entry["path"]).read_bytes()).hexdigest()
    (src / "manifest.json").write_text(json.dumps(manifest, indent=2))
    report = import_system1(src, tmp_path / "run")
    assert report["evidence_folder"] == "" and report["absent"] == [] and report["files_verified"] == 5
    run = RunDir.open(tmp_path / "run")
    summary = json.loads(run.file("summary.json").read_text())["workloads"]["mixed"]["backends"]
    assert (summary["native"]["correct"], summary["fast"]["correct"]) == (5, 4)  # labels from checks.correct
    assert report["cleanup"]["per_arm"]["native"]["exit_code"] == 0


# --- the real published files, when a local copy exists ------------------------------------


@pytest.mark.skipif(not (REAL / "manifest.json").is_file(),
                    reason=f"no local copy of system1-omni benchmarks/gdn/artifacts/20261003 at {REAL} "
                           "(build one from the public files; it is never committed)")
def test_real_published_e2e_evidence_reproduces(tmp_path):
    report = import_system1(REAL, tmp_path / "run")
    counts = report["figure_counts"]
    # a copy may hold the whole folder or only the manifest and e2e/ (8 listed files then absent)
    listed = json.loads((REAL / "manifest.json").read_text())["files"]
    absent = sorted(name for name in listed if not (REAL / name).is_file())
    assert report["rows"] == 296 and report["evidence_folder"] == "e2e" and sorted(report["absent"]) == absent
    assert len(listed) == 15 and not [name for name in absent if name.startswith("e2e/")]
    assert counts["mismatch"] == 0 and counts["exact"] + counts["within_rounding"] == counts["compared"] == 23
    assert counts["largest_within_rounding_difference"] < 1e-13
    proc = cli("verify", "--run", str(tmp_path / "run"))
    assert proc.returncode == 0 and "VERIFIED" in proc.stdout
