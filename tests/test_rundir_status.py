"""state.json's status as evidence/rundir.Status: written and read as the plain word, bytes unchanged."""

from __future__ import annotations

import json

from openjev_repro.evidence.rundir import RunDir, Status


def test_status_is_written_as_the_plain_word(tmp_path):
    run = RunDir.create(tmp_path, "s")
    assert json.loads(run.file("state.json").read_text())["status"] == "running"
    run.update_state(status=Status.INCOMPLETE, error="stopped")
    text = run.file("state.json").read_text()
    assert '"status": "incomplete"' in text
    assert run.state_record().status == Status.INCOMPLETE and type(run.state_record().status) is str


def test_a_stale_run_reads_incomplete_as_a_plain_string(tmp_path):
    run = RunDir.create(tmp_path, "s")
    state = run.state_record().to_json()
    state["owner"] = dict(state["owner"], pid=2**22 + 12345, start_ticks=1)  # no such process
    run.write_state(state)
    effective = run.effective_state_record().to_json()
    assert effective["status"] == "incomplete" and type(effective["status"]) is str and effective["stale"]
    assert repr(effective["status"]) == "'incomplete'"  # messages quote it as the plain word


def test_every_status_word():
    assert [s.value for s in Status] == ["running", "complete", "incomplete", "imported"]
