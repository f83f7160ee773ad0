"""The audit path at scale: columnar rows, numpy statistics, one verification in publish, bench-audit."""

from __future__ import annotations

import json
import re
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from audit_kit import build_run, signed_run
from invoking import invoke
from studykit import scripted_backend, write_study

from openjev_repro.audit.compare import compare_runs
from openjev_repro.audit.publish import _write_tar, publish
from openjev_repro.errors import EvidenceError, VerificationError
from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import Row, read_rows
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.results import statistics
from openjev_repro.results.row_table import RowTable, read_table
from openjev_repro.results.statistics import BOOTSTRAP_METHOD, bootstrap_mean_diff_ci, summarize

ROOT = Path(__file__).resolve().parents[1]

TWO_BACKENDS = """\
format_version: 1
study: {id: scale, date: 2026-12-01, purpose: no quadratic path}
inputs: {root: ., files: [{path: r.jsonl, sha256: "%s"}]}
workloads: [{name: mixed, requests: r.jsonl}]
backends: [{name: a, command: [x]}, {name: b, command: [x]}]
protocol: {feasibility_passes: 0, measured_passes: 1}
gates:
  - {name: same, kind: decisions_unchanged, workload: mixed, a: a, b: b}
  - {name: close, kind: max_probability_delta, workload: mixed, a: a, b: b, max: 0.01}
""" % ("0" * 64)


def every_decision_differs(n: int) -> RowTable:
    """n cases answered by two backends, a always "yes" and b always "no"."""
    rows = []
    for backend, p in (("a", 0.9), ("b", 0.1)):
        for seq in range(n):
            rows.append(Row(id=f"case-{seq:06d}", backend=backend, workload="mixed", phase="measured", pass_index=1,
                            seq=seq, start_ns=seq * 10_000_000, end_ns=seq * 10_000_000 + 5_000_000 + seq,
                            status=200, body_sha256="0" * 64, probability=p, decision="yes" if p >= 0.5 else "no",
                            label="yes", input_tokens=100 + seq % 3000, error=None))
    return RowTable.from_rows(rows)


def cpu_seconds(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def test_no_quadratic_path_30000_differing_decisions_summarise_in_under_a_second():
    recipe = parse_recipe(TWO_BACKENDS)
    small, large = every_decision_differs(3_000), every_decision_differs(30_000)
    summary = summarize(large, recipe).to_json()
    comparison = summary["workloads"]["mixed"]["comparisons"][0]
    assert comparison["agreement"] == 0 and len(comparison["differing_ids"]) == 30_000
    # CPU time, not wall time: other work on a busy machine does not count against us.
    t_small = min(cpu_seconds(lambda: summarize(small, recipe)) for _ in range(2))
    t_large = min(cpu_seconds(lambda: summarize(large, recipe)) for _ in range(2))
    # Under a second; on a machine too slow for that, still linear: 10x the cases may cost at most
    # 20x the time, where a quadratic path (a list-membership scan per case) costs 100x.
    assert t_large < 1.0 or t_large < 20 * t_small, (t_small, t_large)


def test_table_and_row_objects_give_the_same_summary(tmp_path):
    run = build_run(tmp_path)
    recipe = parse_recipe(run.file("recipe.yaml").read_text())
    table = read_table(run.rows_path)
    assert list(table.rows()) == read_rows(run.rows_path)
    assert summarize(table, recipe).to_json() == summarize(read_rows(run.rows_path), recipe).to_json()
    assert json.loads(run.file("summary.json").read_text()) == json.loads(json.dumps(summarize(table, recipe).to_json()))


def test_chunked_reading_merges_interned_strings(tmp_path):
    run = build_run(tmp_path)
    whole, pieces = read_table(run.rows_path), read_table(run.rows_path, chunk_bytes=700)
    assert list(pieces.rows()) == list(whole.rows())
    assert pieces.ids.values == whole.ids.values


@pytest.mark.parametrize("edit, message", [
    (lambda row: row.replace('"seq": 1,', '"seq": "1",'), r"rows.jsonl:2: not a valid row \(Expected `int`"),
    (lambda row: row.replace('"probability": 0.32', '"probability": NaN'), "rows.jsonl:2: not a valid row"),
    (lambda row: row.replace('"v": 1', '"v": 7'), "rows.jsonl:2: Row format version 7 is not supported"),
    (lambda row: row.replace('"error": null, ', ""), r"rows.jsonl:2: Row has unknown fields \[\] or lacks \['error'\]"),
    (lambda row: row[:40], "rows.jsonl:2: not a valid row"),
    (lambda row: re.sub(r'"phase": "\w+"', '"phase": "timed"', row),
     "rows.jsonl:2: Row phase 'timed' is not one of first, warmup, feasibility, measured"),
])
def test_a_bad_row_is_an_evidence_error_naming_its_line(tmp_path, edit, message):
    run = build_run(tmp_path)
    lines = run.rows_path.read_text().splitlines()
    assert '"probability": 0.32' in lines[1] and '"seq": 1,' in lines[1]
    lines[1] = edit(lines[1])
    run.rows_path.write_text("\n".join(lines) + "\n")
    with pytest.raises(EvidenceError, match=message):
        read_table(run.rows_path)


def test_bootstrap_is_seeded_chunked_and_independent_of_threads(monkeypatch):
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 5, 5000), rng.normal(90, 5, 4000)
    one = bootstrap_mean_diff_ci(a, b, seed=11, n_boot=400, threads=1)
    assert one == bootstrap_mean_diff_ci(a, b, seed=11, n_boot=400, threads=2)
    assert one != bootstrap_mean_diff_ci(a, b, seed=12, n_boot=400, threads=1)
    assert one[0] < b.mean() - a.mean() < one[1]
    monkeypatch.setattr(statistics, "BOOTSTRAP_CHUNK_VALUES", 5000)  # one resample per chunk: 400 chunks
    many = bootstrap_mean_diff_ci(a, b, seed=11, n_boot=400, threads=2)
    assert many == bootstrap_mean_diff_ci(a, b, seed=11, n_boot=400, threads=1)
    assert abs(many[0] - one[0]) < 1.0 and abs(many[1] - one[1]) < 1.0  # another draw of the same interval


def test_compare_records_the_bootstrap_method(tmp_path):
    a, b = build_run(tmp_path / "a"), build_run(tmp_path / "b", seed=9)
    result = compare_runs(a.path, b.path).to_json()
    assert result["bootstrap_method"]["version"] == BOOTSTRAP_METHOD["version"] == 2
    assert {p["bootstrap"]["method_version"] for p in result["pairs"]} == {2}


def test_publish_leaves_nothing_when_the_run_does_not_verify(tmp_path):
    run, private, _ = signed_run(tmp_path)
    run.rows_path.write_bytes(run.rows_path.read_bytes().replace(b'"seq": 1,', b'"seq": 1, ', 1))
    out = tmp_path / "out" / "bundle.tar.gz"
    out.parent.mkdir()
    with pytest.raises(VerificationError, match="does not verify"):
        publish(run.path, out, aggregate_only=True, key_path=private)
    assert list(out.parent.iterdir()) == []


def test_a_member_that_differs_from_its_signed_digest_fails_the_bundle(tmp_path):
    run, _, _ = signed_run(tmp_path)
    with pytest.raises(VerificationError, match="differs from the file the run signed"):
        _write_tar(RunDir(run.path), {"summary.json": "0" * 64}, {}, tmp_path / "x.tar.gz")


def test_published_bundle_streams_the_signed_bytes(tmp_path):
    run, private, _ = signed_run(tmp_path)
    bundle = publish(run.path, tmp_path / "b.tar.gz", aggregate_only=True, key_path=private)
    with tarfile.open(bundle, "r:gz") as tar:
        assert tar.extractfile("rows.jsonl").read() == run.rows_path.read_bytes()
        assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in tar.getmembers())
    assert not (tmp_path / ".b.tar.gz.tmp").exists()


@pytest.mark.slow
def test_bench_audit_at_a_tiny_size(tmp_path):
    """On a signed run of a real study (two scripted backends): each size's run is synthesised from it in its
    file formats (plan.json read back as its record) and every command timed."""
    recipe = write_study(tmp_path / "study", [scripted_backend("a"), scripted_backend("b")], n=6)
    assert invoke("keygen", "--out", str(tmp_path / "keys")).returncode == 0
    study = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"),
                   "--key", str(tmp_path / "keys" / "openjev-repro.key"), timeout=600)
    assert study.returncode == 0, study.stderr[-2000:]
    run = Path(study.stdout.splitlines()[-1])
    out = tmp_path / "audit.json"
    done = invoke("bench-audit", "--sizes", "1,2", "--rounds", "1", "--source", str(run),
                  "--dir", str(tmp_path / "work"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert [s["factor"] for s in result["sizes"]] == [1, 2]
    small, double = result["sizes"]
    untimed = sum(r.phase in ("first", "warmup") for r in read_rows(run / "rows.jsonl"))  # kept once at every size
    assert untimed and double["rows"] - untimed == 2 * (small["rows"] - untimed)
    assert double["measured_rows_imported"] == 2 * small["measured_rows_imported"]
    for size in result["sizes"]:
        assert set(size["commands"]) == {"import", "verify", "compare", "report", "publish"}
        for c in size["commands"].values():
            assert c["seconds_median"] > 0 and c["ratio_to_sha256sum"] > 0 and c["peak_rss_mib"] > 5
    assert "load_average_1m" in result["machine"] and "| 2x |" in done.stdout
    assert list((tmp_path / "work").iterdir()) == []  # synthesised runs removed


def test_bench_audit_refuses_bad_sizes_and_sources(tmp_path):
    bad = invoke("bench-audit", "--sizes", "0,10", "--source", str(tmp_path))
    assert bad.returncode == 1 and bad.stderr.strip().startswith("error:") and "Traceback" not in bad.stderr
    missing = invoke("bench-audit", "--sizes", "1", "--source", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "not a signed run directory" in missing.stderr


def test_compare_markdown_names_the_first_flips_and_the_json_all(tmp_path):
    from openjev_repro.audit.compare import compare_rows, to_markdown

    table = every_decision_differs(50)
    a_rows = [r for r in table.rows() if r.backend == "a"]
    b_rows = [Row(**{**r.__dict__, "backend": "a"}) for r in table.rows() if r.backend == "b"]
    result = compare_rows(a_rows, b_rows)
    flips = result.to_json()["pairs"][0]["answers"]["decision_flips"]
    assert len(flips) == 50
    line = next(li for li in to_markdown(result).splitlines() if li.startswith("- decision flips"))
    assert line.startswith("- decision flips: 50 of 50 paired cases (case-000000, case-000001")
    assert "case-000019," in line and "case-000020" not in line and "… and 30 more (all in the --out JSON)" in line
