"""`verify`: every changed byte, wrong key, truncated envelope, absent file, bad case ids fail it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_kit import build_run, keypair, signed_run
from invoking import invoke

from openjev_repro.audit.verify import check_case_ids, format_checks, verify_path
from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.rows import read_rows
from openjev_repro.evidence.rundir import ENVELOPE_NAME
from openjev_repro.manifest import write_manifest

ROOT = Path(__file__).resolve().parents[1]


def failed(checks) -> list[str]:
    return [c.name for c in checks if c.passed is False]


def resign(run, private):
    run.file(ENVELOPE_NAME).unlink()
    write_manifest(run.path, key_path=private)


def test_untouched_run_verifies(tmp_path):
    run, _, public = signed_run(tmp_path)
    checks = verify_path(run.path, pubkey=public)
    assert failed(checks) == [], format_checks(checks)
    names = [c.name for c in checks]
    assert {"signature", "subject digests", "no unlisted files", "statistics recomputed", "gates recomputed",
            "response bodies", "case ids", "run complete"} <= set(names)


def test_every_single_byte_flip_fails(tmp_path):
    run, _, public = signed_run(tmp_path)
    targets = run.evidence_files() + [run.file(ENVELOPE_NAME)]
    assert len(targets) >= 12
    for path in targets:
        original = path.read_bytes()
        for offset in {0, len(original) // 2, len(original) - 1}:
            mutated = bytearray(original)
            mutated[offset] ^= 0x01
            path.write_bytes(bytes(mutated))
            try:
                assert failed(verify_path(run.path, pubkey=public)), f"flip at {path.name}:{offset} went unnoticed"
            finally:
                path.write_bytes(original)
    assert failed(verify_path(run.path, pubkey=public)) == []


def test_wrong_key_and_missing_key_fail(tmp_path):
    run, _, _ = signed_run(tmp_path)
    _, other = keypair(tmp_path / "other")
    checks = verify_path(run.path, pubkey=other)
    assert failed(checks) == ["signature"]
    assert "No signature by the given key" in next(c.detail for c in checks if c.name == "signature")
    assert failed(verify_path(run.path, pubkey=None)) == ["signature"]


def test_truncated_envelope_fails(tmp_path):
    run, _, public = signed_run(tmp_path)
    env = run.file(ENVELOPE_NAME)
    env.write_bytes(env.read_bytes()[: len(env.read_bytes()) // 2])
    checks = verify_path(run.path, pubkey=public)
    assert failed(checks) == ["envelope"] and "truncated" in checks[0].detail


def test_listed_file_absent_and_unlisted_file_present(tmp_path):
    run, _, public = signed_run(tmp_path)
    run.log_path("hf").unlink()
    assert "subject digests" in failed(verify_path(run.path, pubkey=public))
    detail = next(c.detail for c in verify_path(run.path, pubkey=public) if c.name == "subject digests")
    assert "logs/hf.log is listed but absent" in detail
    run.log_path("hf").write_text("hf started\nhf stopped\n")
    (run.path / "extra.txt").write_text("smuggled\n")
    assert failed(verify_path(run.path, pubkey=public)) == ["no unlisted files"]


@pytest.mark.parametrize("what", ["rows", "summary", "recipe"])
def test_tampered_then_resigned_is_caught_by_recomputation(tmp_path, what):
    """Even with digests re-signed, changed rows, summary or recipe no longer recompute."""
    run, private, public = signed_run(tmp_path)
    if what == "rows":
        lines = run.rows_path.read_text().splitlines()
        row = json.loads(lines[7])
        row["end_ns"] -= 5_000_000  # a measured request 5 ms faster
        lines[7] = json.dumps(row, sort_keys=True)
        run.rows_path.write_text("\n".join(lines) + "\n")
    elif what == "summary":
        summary = json.loads(run.file("summary.json").read_text())
        summary["workloads"]["mixed"]["backends"]["native"]["overall"]["mean_ms"] *= 0.9
        write_json_atomic(run.file("summary.json"), summary)
    else:
        text = run.file("recipe.yaml").read_text().replace("min_percent: 50.0", "min_percent: 99.0")
        run.file("recipe.yaml").write_text(text)
    resign(run, private)
    bad = failed(verify_path(run.path, pubkey=public))
    assert bad and set(bad) <= {"statistics recomputed", "gates recomputed", "response bodies"}


def test_duplicate_and_missing_case_ids(tmp_path):
    rows = read_rows(build_run(tmp_path).rows_path)
    assert check_case_ids(rows, {"mixed": 1}) == []
    dup = [r if not (r.backend == "native" and r.phase == "measured" and r.pass_index == 2 and r.seq == 3)
           else r.__class__(**{**r.__dict__, "id": "case-02"}) for r in rows]
    problems = check_case_ids(dup, {"mixed": 1})
    assert any("native/mixed measured pass 2: duplicate case ids case-02" in p for p in problems)
    assert any("missing case ids case-03" in p for p in problems)
    short = [r for r in rows if not (r.backend == "hf" and r.phase == "measured" and r.pass_index == 1 and r.seq == 5)]
    assert any("hf/mixed measured pass 1: missing case ids case-05" in p for p in check_case_ids(short, {"mixed": 1}))


def test_unsigned_run_needs_allow_unsigned(tmp_path):
    run = build_run(tmp_path)
    write_manifest(run.path, key_path=None)
    assert failed(verify_path(run.path)) == ["signature"]
    assert failed(verify_path(run.path, allow_unsigned=True)) == []


def test_cli_verify_prints_a_checklist_and_exits_by_outcome(tmp_path):
    run, _, public = signed_run(tmp_path)
    ok = invoke("verify", "--run", str(run.path), "--pubkey", str(public))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "PASS  signature" in ok.stdout and ok.stdout.strip().endswith("VERIFIED: 0 of 11 checks failed.")
    run.file("summary.json").write_bytes(run.file("summary.json").read_bytes().replace(b"1", b"2", 1))
    bad = invoke("verify", "--run", str(run.path), "--pubkey", str(public))
    assert bad.returncode == 1 and "FAIL  subject digests" in bad.stdout and "summary.json" in bad.stdout


def test_a_case_missing_from_every_pass_is_caught_by_the_plan(tmp_path):
    from openjev_repro.audit.verify import check_planned_order

    rows = read_rows(build_run(tmp_path).rows_path)
    planned = sorted({r.id for r in rows if r.phase == "measured"})
    assert check_planned_order(rows, {"mixed": planned}) == []
    # Drop case-05 from every pass: the passes still agree with each other, but not with the plan.
    dropped = [r for r in rows if r.id != "case-05"]
    assert check_case_ids([r for r in dropped if r.seq < 5], {"mixed": 1}) == []
    problems = check_planned_order(dropped, {"mixed": planned})
    assert problems and all("missing case-05" in p for p in problems)


# --- damaged evidence is a failed check; a bug of verify is never called damage (issue 23 item 4) ---------


def test_a_malformed_plan_case_ids_fails_its_check(tmp_path):
    run = build_run(tmp_path)
    plan = json.loads(run.file("plan.json").read_text())
    write_json_atomic(run.file("plan.json"), {**plan, "case_ids": {"mixed": [["case-00"]]}})
    write_manifest(run.path, key_path=None)
    checks = {c.name: c for c in verify_path(run.path, allow_unsigned=True)}
    assert checks["case ids"].passed is False
    assert checks["case ids"].detail == (f"EvidenceError: {run.file('plan.json')}: Expected `str`, got `array` - "
                                         "at `$.case_ids[...][0]`.")


def test_a_response_body_that_is_not_text_fails_its_check(tmp_path):
    run = build_run(tmp_path)
    path = run.file("responses/hf.jsonl")
    lines = path.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "body": 7})
    path.write_text("\n".join(lines) + "\n")
    write_manifest(run.path, key_path=None)
    checks = {c.name: c for c in verify_path(run.path, allow_unsigned=True)}
    assert checks["responses"].passed is False
    assert checks["responses"].detail == "EvidenceError: hf.jsonl:1 has a body that is not a string"


def test_an_error_of_verify_itself_is_raised_not_reported_as_damage(tmp_path, monkeypatch):
    from openjev_repro.audit.verify_signed import SignedRun

    run, _, public = signed_run(tmp_path)

    def broken(self):
        return self.predicate["no such key"]  # a programming error inside a check

    monkeypatch.setattr(SignedRun, "complete", broken)
    with pytest.raises(KeyError, match="no such key"):
        verify_path(run.path, pubkey=public)


@pytest.mark.parametrize(("field", "value", "check", "detail"), [
    ("figures", 7, "import record", "EvidenceError: {run}/import.json: Expected `array`, got `int` - at `$.figures`."),
    ("figures", [{"arm": "baseline"}], "imported statistics",
     "EvidenceError: import.json: figures: Object missing required field `pass` - at `$[0]`."),
    ("figure_counts", [1], "import record",
     "EvidenceError: {run}/import.json: Expected `object`, got `array` - at `$.figure_counts`."),
])
def test_a_malformed_import_record_fails_its_check(tmp_path, field, value, check, detail):
    from openjev_repro.audit.importer import import_evidence

    artifacts = ROOT / "tests" / "fixtures" / "system1" / "artifacts"
    import_evidence(artifacts, tmp_path / "run")
    record_path = tmp_path / "run" / "import.json"
    write_json_atomic(record_path, {**json.loads(record_path.read_text()), field: value})
    checks = {c.name: c for c in verify_path(tmp_path / "run", source=artifacts)}
    assert checks[check].passed is False
    assert checks[check].detail == detail.format(run=tmp_path / "run")
    if check != "import record":  # the import made again from the source holds another import.json
        assert checks["source files"].passed is False and "import.json" in checks["source files"].detail
