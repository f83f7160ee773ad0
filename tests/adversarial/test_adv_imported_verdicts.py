"""Imported evidence gets a verdict, and an imported run is bound to its source (issue 38 item 5,
issue 40 items 5, 6 and 10).

Every test runs the real `invoke import-evidence` / `invoke verify` on the three published layouts
(system1-omni's committed fixture, and the synthetic timings-csv and provenance-json copies of
tests/published_layouts.py): a published figure that does not reproduce is NOT REPRODUCED (exit 3,
every figure printed, no run written); a pass shape a run cannot hold, a huge number or a pass number
above 1,000 is one `error:` line (exit 1, no run); only listed raw files become arms; `verify --source`
makes the import again and fails on any difference, import.json included.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import published_layouts as layouts
import pytest
from advkit import REPO, invoke, one_error_line

ARTIFACTS = REPO / "tests" / "fixtures" / "system1" / "artifacts"


def _system1(tmp: Path) -> Path:
    return Path(shutil.copytree(ARTIFACTS, tmp / "src"))


def _relist_manifest(src: Path, name: str) -> None:
    manifest = json.loads((src / "manifest.json").read_text())
    data = (src / name).read_bytes()
    manifest["files"][name].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (src / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _relist_provenance(src: Path) -> None:
    """provenance.json listing every raw-*.jsonl and stats file present, with its sha256."""
    data = json.loads((src / "provenance.json").read_text())
    data["files"] = [{"file": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "copied_verbatim": True}
                     for p in sorted(src.iterdir()) if p.name.startswith(("raw-", "stats-"))]
    (src / "provenance.json").write_text(json.dumps(data, indent=2))


def _import(src: Path, out: Path, *extra: str):
    return invoke("import-evidence", "--src", str(src), "--out", str(out), *extra, timeout=120)


def _not_reproduced(proc, out: Path) -> list[str]:
    """The NOT REPRODUCED contract: exit 3, the verdict first, every figure printed, no run written."""
    lines = proc.stdout.splitlines()
    assert proc.returncode == 3, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stdout + proc.stderr
    assert lines[0] == "Verdict: NOT REPRODUCED", proc.stdout
    assert "published figures do not reproduce from the published rows; no run was written." in lines[-1]
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "NOT REPRODUCED" in err[0], proc.stderr
    assert not out.exists()
    return lines


# --- a verdict on the published figures (issue 38 item 5) -------------------------------------------


def test_untouched_layouts_say_reproduced(tmp_path):
    for name, src in (("system1", _system1(tmp_path)), ("timings", layouts.timings_csv(tmp_path / "timings")),
                      ("provenance", layouts.provenance_json(tmp_path / "provenance"))):
        out = tmp_path / f"run-{name}"
        proc = _import(src, out)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1].startswith("Verdict: REPRODUCED: "), proc.stdout
        verified = invoke("verify", "--run", str(out), "--source", str(src), timeout=120)
        assert verified.returncode == 0 and "PASS  published figures      REPRODUCED:" in verified.stdout, verified.stdout
        assert "PASS  source files" in verified.stdout and "VERIFIED" in verified.stdout


def test_a_changed_published_figure_is_not_reproduced_and_writes_no_run(tmp_path):
    src = _system1(tmp_path)
    summary = json.loads((src / "e2e" / "summary.json").read_text())
    published = summary["arms"]["candidate"]["passes"][0]["mean_ms"]
    summary["arms"]["candidate"]["passes"][0]["mean_ms"] = published + 0.5
    (src / "e2e" / "summary.json").write_text(json.dumps(summary, indent=2))
    _relist_manifest(src, "e2e/summary.json")
    lines = _not_reproduced(_import(src, tmp_path / "run"), tmp_path / "run")
    changed = [ln for ln in lines if ln.startswith("candidate pass 1 mean_ms: ")]
    assert len(changed) == 1 and changed[0].endswith(" (mismatch)")
    assert changed[0].startswith(f"candidate pass 1 mean_ms: published {published + 0.5!r}, recomputed ")
    assert sum(" (exact)" in ln or " (within rounding)" in ln for ln in lines) == 22  # every other figure, printed


def test_a_dropped_row_is_not_reproduced(tmp_path):
    src = _system1(tmp_path)
    for name in ("e2e/baseline-measured-1.jsonl", "e2e/baseline-measured-2.jsonl"):  # one case, from every pass
        rows = (src / name).read_text().splitlines(keepends=True)
        (src / name).write_text("".join(r for r in rows if json.loads(r)["id"] != "syn-long-02"))
        _relist_manifest(src, name)
    lines = _not_reproduced(_import(src, tmp_path / "run"), tmp_path / "run")
    assert any(ln.startswith("baseline pass 2 requests: published 6, recomputed 5 (mismatch)") for ln in lines), lines


def test_a_row_dropped_from_one_pass_is_refused(tmp_path):
    src = _system1(tmp_path)
    rows = (src / "e2e" / "baseline-measured-2.jsonl").read_text().splitlines(keepends=True)
    (src / "e2e" / "baseline-measured-2.jsonl").write_text("".join(r for r in rows if json.loads(r)["id"] != "syn-long-02"))
    _relist_manifest(src, "e2e/baseline-measured-2.jsonl")
    line = one_error_line(_import(src, tmp_path / "run"))
    assert line == ("error: e2e/baseline-measured-2.jsonl: case ids differ from the arm's first pass "
                    "(missing syn-long-02; extra none).")
    assert not (tmp_path / "run").exists()


def test_a_dropped_timings_row_is_not_reproduced(tmp_path):
    src = layouts.timings_csv(tmp_path / "src")
    rows = (src / "timings.csv").read_text().splitlines(keepends=True)
    (src / "timings.csv").write_text("".join(rows[:-1]))
    lines = _not_reproduced(_import(src, tmp_path / "run"), tmp_path / "run")
    assert any("requests: published" in ln and "(mismatch)" in ln for ln in lines)


def test_an_unlisted_raw_file_never_becomes_an_arm(tmp_path):
    src = layouts.provenance_json(tmp_path / "src")
    shutil.copy(src / "raw-all-c1-p0.jsonl", src / "raw-sneaky-c1-p0.jsonl")
    text = (src / "raw-sneaky-c1-p0.jsonl").read_text().replace('"tag": "all"', '"tag": "sneaky"')
    (src / "raw-sneaky-c1-p0.jsonl").write_text(text)
    line = one_error_line(_import(src, tmp_path / "run"))
    assert "raw-sneaky-c1-p0.jsonl: present but not listed in provenance.json" in line
    assert not (tmp_path / "run").exists()


def test_a_missing_listed_raw_file_is_said_missing(tmp_path):
    src = layouts.provenance_json(tmp_path / "src")
    (src / "raw-off-c1-p1.jsonl").unlink()
    line = one_error_line(_import(src, tmp_path / "run"))
    assert "raw-off-c1-p1.jsonl: listed in provenance.json but missing" in line
    assert not (tmp_path / "run").exists()


def test_verify_source_of_an_earlier_import_says_not_reproduced_when_the_source_changed(tmp_path):
    src = _system1(tmp_path)
    assert _import(src, tmp_path / "run").returncode == 0
    summary = json.loads((src / "e2e" / "summary.json").read_text())
    summary["arms"]["baseline"]["passes"][1]["requests"] = 5
    (src / "e2e" / "summary.json").write_text(json.dumps(summary, indent=2))
    _relist_manifest(src, "e2e/summary.json")  # a consistent source, whose figures no longer reproduce
    proc = invoke("verify", "--run", str(tmp_path / "run"), "--source", str(src), timeout=120)
    assert proc.returncode == 1 and "FAIL  source files           NOT REPRODUCED: 1 of 23 published figures" in \
        proc.stdout, proc.stdout
    assert "baseline pass 2 requests: published 5, recomputed 6 (mismatch)" in proc.stdout


# --- import.json bound to the source (issue 40 item 6) ---------------------------------------------


@pytest.mark.parametrize("edit", [
    lambda r: r["published_gates"][0].update(outcome=True),
    lambda r: r["study"].update(hardware=["gpu: NVIDIA H200"]),
    lambda r: r["study"].update(date="2026-10-03"),
    lambda r: r["published"].update(conclusion="The candidate is 20% faster."),
    lambda r: r["published"].update(accepted_e2e_latency_gate=True),
    lambda r: r["study"].update(hypothesis="the candidate is faster"),
], ids=["gate outcome", "hardware", "date", "conclusion", "accepted gate", "hypothesis"])
def test_an_edited_import_record_fails_verify_source(tmp_path, edit):
    src = _system1(tmp_path)
    assert _import(src, tmp_path / "run").returncode == 0
    record = json.loads((tmp_path / "run" / "import.json").read_text())
    edit(record)
    (tmp_path / "run" / "import.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    proc = invoke("verify", "--run", str(tmp_path / "run"), "--source", str(src), timeout=120)
    assert proc.returncode == 1, proc.stdout
    assert "FAIL  source files           the import made again from" in proc.stdout
    assert "differs from this run: import.json" in proc.stdout and "VERIFIED" not in proc.stdout


def test_an_extra_file_in_a_system1_source_fails_verify_source(tmp_path):
    src = _system1(tmp_path)
    assert _import(src, tmp_path / "run").returncode == 0
    (src / "e2e" / "extra-measured-1.jsonl").write_text("{}\n")  # import refuses a source like this
    proc = invoke("verify", "--run", str(tmp_path / "run"), "--source", str(src), timeout=120)
    assert proc.returncode == 1 and "FAIL  source files           the import from" in proc.stdout, proc.stdout
    assert "e2e/extra-measured-1.jsonl: present but not in manifest.json" in proc.stdout


# --- every imported run verifies, or the import refuses (issue 40 item 5) ---------------------------


def _two_concurrencies(src: Path) -> None:
    shutil.copy(src / "raw-off-c1-p0.jsonl", src / "raw-off-c2-p0.jsonl")


def _p00(src: Path) -> None:
    shutil.copy(src / "raw-off-c1-p0.jsonl", src / "raw-off-c1-p00.jsonl")


def _other_cases(src: Path) -> None:
    path = src / "raw-off-c1-p1.jsonl"
    path.write_text(path.read_text().replace('"img-syn-05"', '"img-syn-99"'))


@pytest.mark.parametrize(("shape", "message"), [
    (_two_concurrencies, "off replay pass 1: a case appears twice"),
    (_p00, "off replay pass 1: a case appears twice"),
    (_other_cases, "off replay pass 2 holds other cases than all pass 1 (missing img-syn-05; extra img-syn-99)"),
], ids=["two concurrencies of one mode and pass", "p0 and p00", "passes with different case ids"])
def test_a_provenance_pass_shape_a_run_cannot_hold_is_refused(tmp_path, shape, message):
    src = layouts.provenance_json(tmp_path / "src")
    shape(src)
    _relist_provenance(src)
    line = one_error_line(_import(src, tmp_path / "run"))
    assert message in line and not (tmp_path / "run").exists()


def test_sha256sums_variants_with_different_sample_sets_are_refused(tmp_path):
    import gzip

    src = layouts.sha256sums(tmp_path / "src")
    rows = gzip.decompress((src / "bench.jsonl.gz").read_bytes()).decode().splitlines()
    kept = [r for r in rows if not ('"variant": "packed"' in r and '"cell": "b1"' in r and '"sample": 9' in r)]
    (src / "bench.jsonl.gz").write_bytes(gzip.compress(("\n".join(kept) + "\n").encode(), mtime=0))
    provenance = json.loads((src / "provenance.json").read_text())
    provenance["report_source_sha256"]["bench.jsonl"] = hashlib.sha256(("\n".join(kept) + "\n").encode()).hexdigest()
    (src / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    layouts.write_sums(src)
    line = one_error_line(_import(src, tmp_path / "run"))
    assert "bench.packed b1 pass 1 holds other cases than bench.eager pass 1 (missing 9; extra none)" in line


def test_a_400_digit_integer_is_one_error_line(tmp_path):
    src = layouts.provenance_json(tmp_path / "src")
    path = src / "raw-off-c1-p0.jsonl"
    rows = path.read_text().splitlines()
    row = json.loads(rows[0])
    row["client_s"] = 10**400
    path.write_text("\n".join([json.dumps(row), *rows[1:]]) + "\n")
    _relist_provenance(src)
    line = one_error_line(_import(src, tmp_path / "run"))
    assert line == "error: raw-off-c1-p0.jsonl:1: Number out of range - at `$.client_s`."


def test_a_published_mean_of_1e200_is_not_reproduced(tmp_path):
    src = layouts.timings_csv(tmp_path / "src")
    summary = json.loads((src / "summary.json").read_text())
    arm = min(summary["results"])
    workload = min(summary["results"][arm])
    summary["results"][arm][workload][0]["mean_ms"] = 1e200
    (src / "summary.json").write_text(json.dumps(summary, indent=2))
    lines = _not_reproduced(_import(src, tmp_path / "run"), tmp_path / "run")
    assert any(ln.startswith(f"{arm} {workload} pass 1 mean_ms: published 1e+200, recomputed ") for ln in lines)


def test_a_pass_number_above_1000_is_one_error_line_about_the_source(tmp_path):
    src = layouts.provenance_json(tmp_path / "src")
    text = (src / "raw-off-c1-p1.jsonl").read_text().replace('"pass": 1,', '"pass": 1000,')
    (src / "raw-off-c1-p1.jsonl").unlink()
    (src / "raw-off-c1-p1000.jsonl").write_text(text)
    _relist_provenance(src)
    line = one_error_line(_import(src, tmp_path / "run"))
    assert line == ("error: off replay: pass 1001 is above the 1000 passes a run may hold; not imported.")
    assert "recipe" not in line


# --- --format auto never guesses (issue 40 item 10) ------------------------------------------------


def test_format_auto_refuses_a_folder_of_two_layouts_and_names_both(tmp_path):
    src = layouts.timings_csv(tmp_path / "src")
    (src / "SHA256SUMS").write_text("".join(f"{hashlib.sha256((src / n).read_bytes()).hexdigest()}  {n}\n"
                                            for n in ("summary.json", "timings.csv")))
    line = one_error_line(_import(src, tmp_path / "run", "--format", "auto"))
    assert "holds the layouts of sha256sums and timings-csv; --format auto picks none of them" in line
    chosen = _import(src, tmp_path / "run", "--format", "timings-csv")
    assert chosen.returncode == 0, chosen.stderr


def test_a_missing_listed_rows_member_is_said_missing(tmp_path):
    src = layouts.sha256sums(tmp_path / "src")
    (src / "bench.jsonl.gz").unlink()
    line = one_error_line(_import(src, tmp_path / "run"))
    assert "bench.jsonl.gz: listed but missing; the published figures count its rows" in line
    assert not (tmp_path / "run").exists()


def test_verify_source_accepts_an_untouched_copy_under_another_name(tmp_path):
    """The user's copy of the published folder need not have the first import's path or folder name (the
    date a folder is named for included): the import is made again as the first import wrote it."""
    src = layouts.provenance_json(tmp_path / "review-20261006")
    assert _import(src, tmp_path / "run").returncode == 0
    assert json.loads((tmp_path / "run" / "import.json").read_text())["study"]["date"] == "2026-10-06"
    copy = Path(shutil.copytree(src, tmp_path / "elsewhere" / "my-copy"))
    proc = invoke("verify", "--run", str(tmp_path / "run"), "--source", str(copy), timeout=120)
    assert proc.returncode == 0 and "PASS  source files" in proc.stdout, proc.stdout
