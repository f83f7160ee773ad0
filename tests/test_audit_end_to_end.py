"""A real study through the runner (loopback scripted backends), signed, then verified and published."""

from __future__ import annotations

from studykit import scripted_backend, write_study

from openjev_repro.audit.publish import publish
from openjev_repro.audit.verify import format_checks, verify_path
from openjev_repro.manifest import generate_keypair
from openjev_repro.orchestrator.runner import StudyOptions, run_study


def test_signed_study_verifies_and_publishes(tmp_path):
    private, public, _ = generate_keypair(tmp_path / "keys")
    gates = [{"name": "same", "kind": "decisions_unchanged", "workload": "mixed", "a": "one", "b": "two"}]
    recipe = write_study(tmp_path, [scripted_backend("one"), scripted_backend("two")], gates=gates)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", key_path=private))
    checks = verify_path(run.path, pubkey=public)
    assert [c.name for c in checks if c.passed is not True] == [], format_checks(checks)
    bundle = publish(run.path, tmp_path / "pub.tar.gz", aggregate_only=True, key_path=private)
    checks = verify_path(bundle, pubkey=public)
    assert [c.name for c in checks if c.passed is False] == [], format_checks(checks)
