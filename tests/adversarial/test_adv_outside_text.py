"""Issue 40, items 7 and 9: text from outside reaches a person escaped, and what a user gives cannot
reach past the files it names.

- a package version a server reports in /health cannot forge an `error:` line, nor break out of the
  report's ENVIRONMENT DRIFT banner; a newline in a recipe `url` does not split its error in two;
- a NUL in the reservation note of `submit` is one escaped character of Slurm's metadata, never a
  traceback or a half-made submission (Slurm itself cannot run here: a stand-in `sbatch` records
  what it was given and answers a job id);
- verifying a collect directory does not follow a symbolic link out of it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml
from advkit import invoke
from studykit import scripted_backend, write_study

from openjev_repro.printable import printable

FORGED = "1.0\nerror: forged by the server"


def _forging_recipe(tmp: Path) -> Path:
    backend = scripted_backend("forger")
    health = tmp / "health.json"
    health.write_text(json.dumps({"packages": {"torch": FORGED}}))
    backend["env"]["SCRIPTED_HEALTH_FILE"] = str(health)
    backend["environment"] = {"packages": {"torch": "2.0.0"}}
    return write_study(tmp, [backend], n=3, protocol={"feasibility_passes": 0, "measured_passes": 1})


def test_printable_escapes_what_would_break_a_line_and_keeps_the_rest():
    assert printable("a\nb\r\tc\x00\x1b[31m\x7f\x85\u2028\u202e") == "a\\nb\\r\\tc\\x00\\x1b[31m\\x7f\\x85\\u2028\\u202e"
    assert printable("Zürich 東京 ≤ 5 µs ✓") == "Zürich 東京 ≤ 5 µs ✓"


def test_a_version_from_health_cannot_forge_an_error_line(tmp_path):
    proc = invoke("study", "--recipe", str(_forging_recipe(tmp_path)), "--out", str(tmp_path / "runs"), timeout=180)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]  # progress lines aside
    assert "package torch" in line and "1.0\\nerror: forged by the server" in line


def test_a_version_from_health_stays_inside_the_drift_banner(tmp_path):
    proc = invoke("study", "--recipe", str(_forging_recipe(tmp_path)), "--out", str(tmp_path / "runs"),
                  "--allow-environment-drift", timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [run] = (tmp_path / "runs").iterdir()
    lines = (run / "report.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "**ENVIRONMENT DRIFT**" in line)
    banner = lines[start:lines.index("", start)]
    assert all(line.startswith(">") for line in banner), banner
    assert any("1.0\\nerror: forged by the server" in line for line in banner), banner
    assert not any(line.startswith("error: forged") for line in lines + proc.stdout.splitlines())


def test_a_newline_in_a_recipe_url_stays_in_one_error_line(tmp_path):
    recipe = write_study(tmp_path, [{"name": "elsewhere", "url": "http://loc\nerror:1"}])
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "loc\\nerror:1" in line and line.startswith("error: Backend elsewhere")


def test_a_nul_in_the_reservation_note_is_escaped_in_the_slurm_metadata(tmp_path):
    from openjev_repro.manifest.keys import generate_keypair

    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")])
    data = yaml.safe_load(recipe.read_text())
    data["controls"] = {"reservation": {"note": "lab\x00run"}}
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    private, _, _ = generate_keypair(tmp_path / "key")
    stand_in = tmp_path / "bin"  # a test double of Slurm's sbatch: records its argv, answers a job id
    stand_in.mkdir()
    (stand_in / "sbatch").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "sbatch-argv"}\necho 4242\n')
    (stand_in / "sbatch").chmod(0o755)
    proc = invoke("submit", "--recipe", str(recipe), "--replicates", "1", "--key", str(private),
                  "--out", str(tmp_path / "subs"), "--time", "5m",
                  env={"PATH": f"{stand_in}{os.pathsep}{os.environ['PATH']}"}, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    argv = (tmp_path / "sbatch-argv").read_text()
    assert "--job-name=lab\\x00run" in argv and "\x00" not in argv
    [submission] = (tmp_path / "subs").iterdir()
    assert json.loads((submission / "submission.json").read_text())["rounds"][0]["array_job_id"] == 4242


def _signed_collection(tmp: Path) -> tuple[Path, Path]:
    """A collect directory as `invoke collect` writes it (two files and the envelope), and the public key."""
    from openjev_repro.cluster.collect import SUMMARY_ENVELOPE, SUMMARY_PREDICATE_TYPE
    from openjev_repro.manifest.dsse import envelope_bytes, make_envelope
    from openjev_repro.manifest.keys import generate_keypair, load_private_key

    private, public, _ = generate_keypair(tmp / "key")
    directory = tmp / "submission" / "collect-20261204T000000Z"
    directory.mkdir(parents=True)
    files = {"summary.json": b'{"verdict": "PASS"}\n', "summary.md": b"# Cross-host summary\n"}
    statement = {"_type": "https://in-toto.io/Statement/v1", "predicateType": SUMMARY_PREDICATE_TYPE,
                 "subject": [{"name": n, "digest": {"sha256": hashlib.sha256(d).hexdigest()}} for n, d in files.items()],
                 "predicate": {"submission": "s", "replicates": 1, "verdict": "PASS"}}
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    files[SUMMARY_ENVELOPE] = envelope_bytes(make_envelope(payload, load_private_key(private)))
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory, public


def test_a_collection_verifies_as_written(tmp_path):
    directory, public = _signed_collection(tmp_path)
    proc = invoke("verify", "--run", str(directory), "--pubkey", str(public))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["summary.md", "summary.dsse.json"])
def test_verifying_a_collection_does_not_follow_a_link_out_of_it(tmp_path, name):
    directory, public = _signed_collection(tmp_path)
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    outside.write_bytes((directory / name).read_bytes())  # the same bytes: only the link is wrong
    (directory / name).unlink()
    (directory / name).symlink_to(outside)
    proc = invoke("verify", "--run", str(directory), "--pubkey", str(public))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "VERIFIED" not in proc.stdout
    assert "is a symbolic link" in proc.stdout + proc.stderr
