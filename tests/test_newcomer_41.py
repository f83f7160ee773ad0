"""What a new user ran into in issue 41 (items 1, 5, 6, 11), each held by the real command: the demo
study, then `bench-audit` on it (unsigned, then signed with `invoke sign`) and on a committed H200
run; pipes closed by `head`; a mistyped option; a changed input shown by `verify-inputs`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from invoking import REPO, invoke

DEMO = REPO / "recipes" / "demo.yaml"


def _small_demo(tmp: Path) -> Path:
    """recipes/demo.yaml over its first 6 requests, one measured pass (the demo's files and backends)."""
    recipe = yaml.safe_load(DEMO.read_text())
    recipe["workloads"][0]["selection"]["first"] = 6
    recipe["protocol"].update(feasibility_passes=0, measured_passes=1)
    recipe["gates"] = []
    path = tmp / "demo-small.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def unsigned_demo(tmp_path_factory, fixture_root) -> tuple[Path, Path]:
    """(the run, its recipe): a study of the demo without --key, which writes an UNSIGNED manifest."""
    tmp = tmp_path_factory.mktemp("demo41")
    recipe = _small_demo(tmp)
    done = invoke("study", "--recipe", str(recipe), "--inputs-root", str(fixture_root), "--out", str(tmp / "runs"),
                  timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.splitlines()[-1]), recipe


def _bench_audit(source: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    return invoke("bench-audit", "--sizes", "1", "--rounds", "1", "--source", str(source),
                  "--dir", str(tmp / "work"), "--out", str(tmp / "audit.json"), timeout=600)


def test_bench_audit_runs_on_an_unsigned_demo_run_then_sign_signs_it_and_bench_audit_runs_again(
        unsigned_demo, tmp_path):
    run, _ = unsigned_demo
    unsigned = _bench_audit(run, tmp_path / "a")
    assert unsigned.returncode == 0, unsigned.stderr[-3000:]
    assert "| 1x |" in unsigned.stdout and (tmp_path / "a" / "audit.json").is_file()
    # `invoke sign` after a study without --key signs it (it answered "already exists" before)
    keys = tmp_path / "key"
    assert invoke("keygen", "--out", str(keys)).returncode == 0
    signed = invoke("sign", "--run", str(run), "--key", str(keys / "openjev-repro.key"))
    assert signed.returncode == 0 and signed.stdout.startswith("signed manifest:"), signed.stdout + signed.stderr
    verified = invoke("verify", "--run", str(run), "--pubkey", str(keys / "openjev-repro.pub"))
    assert verified.returncode == 0 and "UNSIGNED" not in verified.stdout, verified.stdout + verified.stderr
    again = invoke("sign", "--run", str(run), "--key", str(keys / "openjev-repro.key"))
    assert again.returncode == 1 and "already exists" in again.stderr  # a signed manifest is never replaced
    signed_audit = _bench_audit(run, tmp_path / "b")
    assert signed_audit.returncode == 0, signed_audit.stderr[-3000:]


def test_bench_audit_runs_on_a_committed_h200_run(tmp_path):
    done = _bench_audit(REPO / "results" / "h200-fast-27b-shape" / "run", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| 1x |" in done.stdout


def _piped(command: str) -> subprocess.CompletedProcess[str]:
    """`command | head -1` in a real shell; the exit status is the command's (PIPESTATUS)."""
    script = f"{command} | head -1; exit ${{PIPESTATUS[0]}}"
    return subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m invoke ARGS` writing into a pipe whose reader has already gone (as under `| head -1` once
    head exited): its first write fails whatever the machine's load, where `| head -1` races a small output."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300, check=False)
    finally:
        os.close(write)


def test_a_closed_pipe_ends_list_and_verify_inputs_quietly_with_141(unsigned_demo, fixture_root):
    _, recipe = unsigned_demo
    python = sys.executable
    listed = _into_a_closed_pipe("--list")
    assert listed.returncode == 141 and listed.stderr == "", listed
    assert _piped(f"{python} -m invoke --list").stdout == "Available tasks:\n"  # what head shows
    inputs = _into_a_closed_pipe("verify-inputs", "--recipe", str(recipe), "--inputs-root", str(fixture_root))
    assert inputs.returncode == 141 and inputs.stderr == "", inputs  # was exit 1, silently
    shown = _piped(f"{python} -m invoke verify-inputs --recipe {recipe} --inputs-root {fixture_root}")
    assert shown.stdout.startswith("Inputs under ")


def test_a_mistyped_option_gets_one_error_line_naming_the_right_one():
    done = invoke("study", "--recipie", "recipes/demo.yaml")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == ("error: --recipie is not an option of `invoke study`; did you mean --recipe? "
                                   "(`invoke study --help` lists every option).")
    task = invoke("stdy")
    assert task.returncode == 1 and task.stderr.startswith("error: stdy is not a task") and "study?" in task.stderr


def test_a_changed_input_shows_both_digests_apart_and_a_fix_that_applies(unsigned_demo, fixture_root, tmp_path):
    _, recipe = unsigned_demo
    inputs = tmp_path / "inputs"
    shutil.copytree(fixture_root, inputs)
    temperature = inputs / "checkpoint" / "temperature.json"
    temperature.write_text(temperature.read_text().replace("}", ' }'))
    listed = invoke("verify-inputs", "--recipe", str(recipe), "--inputs-root", str(inputs))
    assert listed.returncode == 1
    [row] = [line for line in listed.stdout.splitlines() if "temperature.json" in line]
    before, _, after = row.split("│")[-2].strip().partition(" → ")
    assert before != after and len(before) >= 12, row  # never "07d560183ac9 → 07d560183ac9"
    study = invoke("study", "--recipe", str(recipe), "--inputs-root", str(inputs), "--out", str(tmp_path / "runs"))
    [error] = [line for line in study.stderr.splitlines() if line.startswith("error:")]
    assert f"`rm -r {inputs} && invoke fixture --out {inputs}`" in error and "no backend was started" in error
