"""Every reader of a file we write refuses a format_version it does not read (UnsupportedFormat,
one `error:` line at the CLI), and every writer's current version is one its readers accept.

A newer tool is simulated by widening READABLE_VERSIONS while it signs, so the run on disk is
exactly what that tool would leave: signed, with a version this tool has never seen.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from audit_kit import build_run, keypair
from invoking import invoke

from openjev_repro.audit.importer import IMPORT_FORMAT_VERSION
from openjev_repro.audit.verify import verify_path
from openjev_repro.cluster.submission import Submission
from openjev_repro.errors import EvidenceError, UnsupportedFormat
from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.rundir import READABLE_VERSIONS, STATE_FORMAT_VERSION, RunDir, check_response_entry
from openjev_repro.host.inventory import HOST_FORMAT_VERSION
from openjev_repro.manifest import write_manifest
from openjev_repro.manifest.environment import ENVIRONMENT_FORMAT_VERSION
from openjev_repro.results.report import write_report
from openjev_repro.results.statistics import SUMMARY_FORMAT_VERSION
from openjev_repro.study.planner import PLAN_FORMAT_VERSION

ROOT = Path(__file__).resolve().parents[1]
FUTURE = 99


def _future(path: Path, key: str = "format_version") -> None:
    data = json.loads(path.read_text()) if path.is_file() else {}
    write_json_atomic(path, dict(data, **{key: FUTURE}))


def test_every_writer_writes_a_version_its_readers_read():
    written = {"state.json": STATE_FORMAT_VERSION, "plan.json": PLAN_FORMAT_VERSION,
               "summary.json": SUMMARY_FORMAT_VERSION, "environment.json": ENVIRONMENT_FORMAT_VERSION,
               "host.json": HOST_FORMAT_VERSION, "import.json": IMPORT_FORMAT_VERSION}
    assert {name: v in READABLE_VERSIONS[name] for name, v in written.items()} == dict.fromkeys(written, True)


@pytest.mark.parametrize("name", sorted(set(READABLE_VERSIONS) - {"import.json"}))
def test_signing_refuses_a_run_file_of_a_future_format(tmp_path, name):
    run = build_run(tmp_path / "runs")
    _future(run.file(name))
    with pytest.raises(UnsupportedFormat, match=rf"{name}: format_version {FUTURE} is not a format this tool reads"):
        write_manifest(run.path, key_path=keypair(tmp_path)[0])
    assert not run.file("manifest.dsse.json").exists()


def _signed_by_a_newer_tool(tmp_path: Path, name: str, monkeypatch) -> tuple[RunDir, Path]:
    private, public = keypair(tmp_path)
    run = build_run(tmp_path / "runs")
    _future(run.file(name))
    with monkeypatch.context() as newer:
        newer.setitem(READABLE_VERSIONS, name, (*READABLE_VERSIONS[name], FUTURE))
        write_manifest(run.path, key_path=private)
    return run, public


@pytest.mark.parametrize("name", ["summary.json", "plan.json", "state.json"])
def test_verify_refuses_a_run_signed_in_a_future_format(tmp_path, monkeypatch, name):
    run, public = _signed_by_a_newer_tool(tmp_path, name, monkeypatch)
    with pytest.raises(UnsupportedFormat, match=rf"{name}: format_version {FUTURE}"):
        verify_path(run.path, pubkey=public)


def test_a_future_version_written_after_signing_is_tampering(tmp_path):
    """Changed after signing, the file fails its digest: verify reports that, it does not refuse."""
    private, public = keypair(tmp_path)
    run = build_run(tmp_path / "runs")
    write_manifest(run.path, key_path=private)
    _future(run.file("summary.json"))
    failed = {c.name: c.detail for c in verify_path(run.path, pubkey=public) if c.passed is False}
    assert "summary.json" in failed["subject digests"] and "format_version 99" in failed["copied files"]


def test_verify_refuses_a_response_line_of_a_future_format(tmp_path):
    private, public = keypair(tmp_path)
    run = build_run(tmp_path / "runs")
    path = run.responses_path("native")
    lines = path.read_text().splitlines()
    lines[1] = json.dumps(dict(json.loads(lines[1]), v=FUTURE), sort_keys=True)
    path.write_text("\n".join(lines) + "\n")
    write_manifest(run.path, key_path=private)
    with pytest.raises(UnsupportedFormat, match=rf"native.jsonl:2: v {FUTURE} is not a format this tool reads \(v 1\)"):
        verify_path(run.path, pubkey=public)


def test_response_lines_without_v_are_format_1():
    assert check_response_entry({"id": "a"}, "r:1") == {"id": "a"}
    assert check_response_entry({"id": "a", "v": 1}, "r:1")["v"] == 1
    with pytest.raises(UnsupportedFormat, match="r:1: v True"):
        check_response_entry({"v": True}, "r:1")


@pytest.mark.parametrize("name", ["state.json", "summary.json", "environment.json", "host.json", "backends.json"])
def test_report_refuses_a_future_format(tmp_path, name):
    run = build_run(tmp_path / "runs")
    _future(run.file(name))
    with pytest.raises(UnsupportedFormat, match=rf"{name}: format_version {FUTURE}"):
        write_report(run.path, tmp_path / "out", plots=False)


def test_submission_and_attempt_records_of_a_future_format(tmp_path):
    sub = Submission.create(tmp_path, "s", {"recipe": "r.yaml", "replicates": 1})
    (sub.replicate_dir(1) / "attempt-7.json").write_text(json.dumps({"format_version": FUTURE, "job_id": "7"}))
    assert Submission.open(sub.path).attempts(1) == []  # not read, left as it is
    _future(sub.path / "submission.json")
    with pytest.raises(UnsupportedFormat, match=rf"submission.json: format_version {FUTURE}"):
        Submission.open(sub.path)
    assert issubclass(UnsupportedFormat, EvidenceError)


def _invoke(*args: str) -> subprocess.CompletedProcess:
    return invoke(*args, cwd=ROOT, timeout=120)


def test_cli_prints_one_error_line(tmp_path, monkeypatch):
    run, public = _signed_by_a_newer_tool(tmp_path, "summary.json", monkeypatch)
    done = _invoke("verify", "--run", str(run.path), "--pubkey", str(public))
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {run.file('summary.json')}: format_version 99")
