"""Outputs never touch evidence: every `--out` refuses a run (signed or not), a path inside one, an existing
file; keygen refuses files and dangling links; compare refuses incomplete runs unless told, and then says so."""

from __future__ import annotations

import pytest
from advkit import invoke, one_error_line
from audit_kit import build_run, signed_run
from studykit import scripted_backend, write_study


@pytest.fixture()
def runs(tmp_path):
    signed, private, _public = signed_run(tmp_path)
    other = build_run(tmp_path / "more")
    return signed, other, private


def test_report_out_into_another_signed_run_is_refused(runs):
    signed, other, _ = runs
    before = {p: p.read_bytes() for p in signed.path.rglob("*") if p.is_file()}
    line = one_error_line(invoke("report", "--run", str(other.path), "--out", str(signed.path)))
    assert line == (f"error: --out {signed.path} is inside the run directory {signed.path}; outputs never go into a "
                    "run (its files are evidence). Choose a path outside every run.")
    assert {p: p.read_bytes() for p in signed.path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("task", ["compare", "publish", "report", "fixture"])
def test_out_inside_a_run_is_refused(runs, task):
    signed, other, private = runs
    target = signed.path / "rows.jsonl" if task in ("compare", "publish") else signed.path / "logs" / "sub"
    args = {"compare": ["compare", "--baseline", str(signed.path), "--candidate", str(other.path)],
            "publish": ["publish", "--run", str(signed.path), "--aggregate-only", "--key", str(private)],
            "report": ["report", "--run", str(other.path)],
            "fixture": ["fixture"]}[task]
    before = signed.rows_path.read_bytes()
    line = one_error_line(invoke(*args, "--out", str(target)))
    assert line.startswith(f"error: --out {target} is inside the run directory {signed.path};")
    assert signed.rows_path.read_bytes() == before and not (signed.path / "logs" / "sub").exists()


def test_out_over_an_existing_file_is_refused(runs, tmp_path):
    signed, other, private = runs
    existing = tmp_path / "keep.json"
    existing.write_text("mine\n")
    for args in (["compare", "--baseline", str(signed.path), "--candidate", str(other.path)],
                 ["publish", "--run", str(signed.path), "--aggregate-only", "--key", str(private)]):
        line = one_error_line(invoke(*args, "--out", str(existing)))
        assert line == f"error: --out {existing} already exists; outputs never overwrite a file. Choose another --out."
    line = one_error_line(invoke("report", "--run", str(other.path), "--out", str(existing)))
    assert line == f"error: --out {existing} exists and is not a directory; choose another --out."
    assert existing.read_text() == "mine\n"


def test_keygen_refuses_a_file_and_a_dangling_link(tmp_path):
    existing = tmp_path / "file"
    existing.write_text("x")
    line = one_error_line(invoke("keygen", "--out", str(existing)))
    assert line == f"error: --out {existing} exists and is not a directory; keygen writes two files into a directory."
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "openjev-repro.key").symlink_to(tmp_path / "nowhere" / "stolen.key")
    line = one_error_line(invoke("keygen", "--out", str(keys)))
    assert line == (f"error: {keys / 'openjev-repro.key'} is a symlink; choose another --out directory or move "
                    "the old key away.")
    assert not (tmp_path / "nowhere").exists()


def test_compare_refuses_an_incomplete_baseline_unless_allowed(tmp_path):
    partial = build_run(tmp_path / "a", status="incomplete")
    complete = build_run(tmp_path / "b")
    line = one_error_line(invoke("compare", "--baseline", str(partial.path), "--candidate", str(complete.path)))
    assert line == (f"error: The baseline {partial.path} is not a complete run (status 'incomplete'); its passes may "
                    "be partial. Pass --allow-incomplete to compare it anyway.")
    tolerances = tmp_path / "tol.yaml"
    tolerances.write_text("format_version: 1\nmax_mean_ratio: 10\n")
    allowed = invoke("compare", "--baseline", str(partial.path), "--candidate", str(complete.path),
                     "--tolerances", str(tolerances), "--allow-incomplete")
    assert allowed.returncode == 0, allowed.stderr
    assert (f"**Verdict: PASS over INCOMPLETE runs (--allow-incomplete): baseline {partial.path} "
            "(status 'incomplete')**") in allowed.stdout


def test_study_with_a_garbage_key_never_leaves_a_complete_looking_report(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=2)
    key = tmp_path / "garbage.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), "--key", str(key), timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(errors) == 1
    assert "is not an unencrypted PEM private key" in errors[0]
    runs = list((tmp_path / "runs").glob("*"))
    if runs:  # a key preflight may refuse before any run directory exists; a late failure must mark it incomplete
        (run,) = runs
        assert '"status": "incomplete"' in (run / "state.json").read_text()
        assert not (run / "manifest.dsse.json").exists()
        if (run / "report.md").exists():
            assert "INCOMPLETE RUN" in (run / "report.md").read_text()
