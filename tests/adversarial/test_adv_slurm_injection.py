"""Cause 3 of issue 25: no recipe text reaches a shell. A newline in controls.reservation.note once
became a command in the Slurm batch script; here the same shape runs on the real local Slurm
(scripts/slurm-local.sh start) and the injected command must not run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from advkit import invoke
from studykit import scripted_backend, write_study
from test_cluster import _slurm_up

from openjev_repro.cluster.jobscript import render_script


def _injecting_recipe(tmp: Path, marker: Path) -> Path:
    recipe = write_study(tmp / "study", [scripted_backend("scripted")])
    data = yaml.safe_load(recipe.read_text())
    data["controls"] = {"reservation": {"note": f"lab run\ntouch {marker}\n#"}}
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    return recipe


def test_the_script_has_one_command_whatever_the_note(tmp_path):
    """Run by the real bash (with `true` as the task's Python): only the exec line runs."""
    marker = tmp_path / "INJECTED"
    argv = [f"--job-name=x\ntouch {marker}\n#", "--comment=a\rb\x1b"]
    script = render_script(submission=tmp_path / f"sub\ntouch {marker}", python="/bin/true", argv=argv,
                           round_number=1)
    assert "--job-name=x\\ntouch" in script and "--comment=a\\rb\\x1b" in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    traced = subprocess.run(["bash", "-x", str(path)], capture_output=True, text=True, check=False, timeout=30)
    assert traced.returncode == 0 and not marker.exists()
    traced_commands = [ln for ln in traced.stderr.splitlines() if ln.startswith("+")]
    assert len(traced_commands) == 1 and traced_commands[0].startswith("+ exec /bin/true -m openjev_repro.cluster.task")


@pytest.mark.slurm
def test_a_newline_in_the_note_runs_nothing_on_the_real_slurm(tmp_path, request):
    if not _slurm_up():
        pytest.skip("no running Slurm with an idle node (scripts/slurm-local.sh start)")
    from openjev_repro.manifest.keys import generate_keypair

    private, _, _ = generate_keypair(tmp_path / "key")
    marker = tmp_path / "INJECTED"
    proc = invoke("submit", "--recipe", str(_injecting_recipe(tmp_path, marker)), "--replicates", "1",
                  "--key", str(private), "--out", str(tmp_path / "subs"), "--time", "5m", timeout=120)
    assert proc.returncode == 0, proc.stderr
    sub = Path(proc.stdout.strip().splitlines()[-1])
    array = json.loads((sub / "submission.json").read_text())["rounds"][0]["array_job_id"]
    request.addfinalizer(lambda: subprocess.run(["scancel", str(array)], check=False, capture_output=True))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = json.loads(invoke("status", "--submission", str(sub), "--json").stdout)["replicates"][0]
        if status["evidence"] == "complete" or status["slurm"]["state"] in ("FAILED", "CANCELLED", "TIMEOUT"):
            break
        time.sleep(1)
    assert status["evidence"] == "complete", status  # the job ran its study to the end
    assert not marker.exists()  # and the note's second line never ran as a command
    script = (sub / "job-1.sh").read_text()
    commands = [ln for ln in script.splitlines() if ln and not ln.startswith("#")]
    assert len(commands) == 1 and commands[0].startswith("exec ")
    assert f"--job-name=lab run touch {marker} #" in script  # Slurm's job name and comment: one line
