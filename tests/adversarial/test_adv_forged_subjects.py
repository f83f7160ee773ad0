"""Forged but signed: a key holder's statement with hostile subjects fails verify, and nothing outside is read."""

from __future__ import annotations

import pytest
from test_adv_symlink_escapes import resign
from test_audit_kit import signed_run

from openjev_repro.audit.verify import verify_path
from openjev_repro.evidence.rundir import ENVELOPE_NAME


@pytest.mark.parametrize("name", ["../outside.json", "/etc/hostname", "logs/../../x", "./rows.jsonl", "a//b",
                                  ENVELOPE_NAME, "logs\\..\\x", ""])
def test_hostile_subject_names_are_malformed(tmp_path, name):
    run, private, public = signed_run(tmp_path)
    resign(run.file(ENVELOPE_NAME), private,
           lambda s: s["subject"].append({"name": name, "digest": {"sha256": "0" * 64}}))
    bad = {c.name: c.detail for c in verify_path(run.path, pubkey=public) if c.passed is False}
    assert list(bad) == ["subject digests"] and bad["subject digests"].startswith("malformed subject")


def test_a_subject_listed_twice_and_a_missing_one_fail(tmp_path):
    run, private, public = signed_run(tmp_path)

    def change(s):
        s["subject"].append(dict(s["subject"][0]))
        s["subject"].append({"name": "absent.json", "digest": {"sha256": "0" * 64}})

    resign(run.file(ENVELOPE_NAME), private, change)
    bad = {c.name: c.detail for c in verify_path(run.path, pubkey=public) if c.passed is False}
    assert list(bad) == ["subject digests"]
    assert "absent.json is listed but absent" in bad["subject digests"] and "listed twice" in bad["subject digests"]


def test_a_signed_incomplete_state_fails(tmp_path):
    run, private, public = signed_run(tmp_path)
    resign(run.file(ENVELOPE_NAME), private, lambda s: s["predicate"]["state"].update(status="running"))
    bad = [c.name for c in verify_path(run.path, pubkey=public) if c.passed is False]
    assert bad == ["run complete"]
