"""Cause 11 of issue 25, the smaller items: an extra signature, a newline in a file name, a dropped or
added measured pass re-signed by the key holder, --out inside a signed run (keygen, study), an
undeclared FIFO in a scanned input folder, and tampered submission.json shapes."""

from __future__ import annotations

import base64
import json
import os
import sys

import pytest
from advkit import invoke, one_error_line
from audit_kit import build_run, keypair, signed_run
from studykit import scripted_backend, write_study

from openjev_repro.audit.verify import format_checks, verify_path
from openjev_repro.cluster.submission import Submission
from openjev_repro.evidence.rows import RowWriter, read_rows
from openjev_repro.manifest import write_manifest
from openjev_repro.manifest.dsse import envelope_bytes
from openjev_repro.manifest.keys import PUBLIC_KEY_NAME


def failed(checks):
    return {c.name: c.detail for c in checks if c.passed is False}


def test_an_extra_signature_beside_a_valid_one_fails(tmp_path):
    run, _, public = signed_run(tmp_path)
    path = run.file("manifest.dsse.json")
    envelope = json.loads(path.read_bytes())
    envelope["signatures"].append({"keyid": "0" * 64, "sig": base64.b64encode(b"garbage" * 9).decode()})
    path.write_bytes(envelope_bytes(envelope))
    assert failed(verify_path(run.path, pubkey=public)) == {
        "signature": "the envelope holds 2 signatures; openjev-repro signs with exactly one, so the others are not ours"}


def test_a_newline_in_a_file_name_cannot_forge_a_verdict_line(tmp_path):
    run, _, public = signed_run(tmp_path)
    (run.path / "logs" / "x\nVERIFIED: 0 of 11 checks failed.").write_text("forged\n")
    text = format_checks(verify_path(run.path, pubkey=public))
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith(("VERIFIED", "FAILED"))] == [lines[-1]]
    assert lines[-1].startswith("FAILED:") and "x\\nVERIFIED" in text


@pytest.mark.parametrize("change", ["drop", "add"])
def test_a_re_signed_run_with_a_dropped_or_added_measured_pass_fails(tmp_path, change):
    """The key holder rewrites rows and summary consistently and re-signs: the recipe still declares two."""
    from openjev_repro.evidence.files import write_json_atomic
    from openjev_repro.evidence.recipe import parse_recipe
    from openjev_repro.results.statistics import summarize

    private, public = keypair(tmp_path / "k")
    run = build_run(tmp_path / "runs")
    rows = read_rows(run.rows_path)
    if change == "drop":
        rows = [r for r in rows if not (r.phase == "measured" and r.pass_index == 2)]
    else:
        rows += [r.__class__(**{**r.__dict__, "pass_index": 3}) for r in rows
                 if r.phase == "measured" and r.pass_index == 2]
    run.rows_path.unlink()
    with RowWriter(run.rows_path) as writer:
        for row in rows:
            writer.write(row)
    write_json_atomic(run.file("summary.json"), summarize(rows, parse_recipe(run.file("recipe.yaml").read_text())).to_json())
    write_manifest(run.path, key_path=private)
    have = "[1]" if change == "drop" else "[1, 2, 3]"
    problems = failed(verify_path(run.path, pubkey=public))
    assert problems.get("protocol passes", "").startswith(f"mixed/hf: measured passes {have}, the recipe declares 2")


def test_keygen_and_study_never_write_inside_a_signed_run(tmp_path):
    run, _, _ = signed_run(tmp_path)
    line = one_error_line(invoke("keygen", "--out", str(run.path / "keys")))
    assert line.startswith(f"error: --out {run.path / 'keys'} is inside the run directory {run.path}")
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")])
    line = one_error_line(invoke("study", "--recipe", str(recipe), "--out", str(run.path / "runs")))
    assert f"is inside the run directory {run.path}" in line
    assert not (run.path / "keys").exists() and not (run.path / "runs").exists()


def test_an_undeclared_fifo_in_a_scanned_folder_fails_verify_inputs(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("scripted")])
    os.mkfifo(tmp_path / "inputs" / "requests" / "pipe")
    proc = invoke("verify-inputs", "--recipe", str(recipe), timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "requests/pipe" in proc.stdout + proc.stderr and "undeclared" in proc.stdout + proc.stderr


SHAPES = [  # submission.json is decoded into its record: msgspec names the field path of what is wrong
    ("replicates", "two", "Expected `int`, got `str` - at `$.replicates`"),
    ("replicates", True, "Expected `int`, got `bool` - at `$.replicates`"),
    ("replicates", 0, "Expected `int` >= 1 - at `$.replicates`"),
    ("rounds", {"a": 1}, "Expected `array`, got `object` - at `$.rounds`"),
    ("rounds", [{"array_job_id": "7", "replicates": [1]}], "Expected `int`, got `str` - at `$.rounds[0].array_job_id`"),
    ("rounds", [{"array_job_id": 7, "replicates": [[1]]}], "Expected `int`, got `array` - at `$.rounds[0].replicates[0]`"),
    ("rounds", [{"array_job_id": 7, "replicates": [2]}], "round 1: replicates must be replicate numbers 1..1"),
    ("sbatch_options", {"partition": ["x"]}, "Expected `str | null`, got `array` - at `$.sbatch_options.partition`"),
    ("key", 5, "Expected `str`, got `int` - at `$.key`"),
]


@pytest.mark.parametrize("field, value, message", SHAPES)
def test_tampered_submission_json_gives_one_error_line(tmp_path, field, value, message):
    private, public = keypair(tmp_path / "k")
    sub = Submission.create(tmp_path / "subs", "audit-test", {
        "recipe": str(tmp_path / "recipe.yaml"), "recipe_sha256": "0" * 64, "replicates": 1, "key": str(private),
        "pubkey": PUBLIC_KEY_NAME, "python": sys.executable, "repo": str(tmp_path), "gpu_controls": False,
        "job_name": "x", "comment": "x", "sbatch_options": {}})
    data = json.loads((sub.path / "submission.json").read_text())
    data[field] = value
    (sub.path / "submission.json").write_text(json.dumps(data))
    for args in (["collect", "--submission", str(sub.path), "--pubkey", str(public)],
                 ["status", "--submission", str(sub.path)], ["submit", "--resume", str(sub.path)]):
        line = one_error_line(invoke(*args))
        assert line == f"error: {sub.path / 'submission.json'} is damaged ({message}" + line.split(message, 1)[1]
