"""Pre-registration, gate attestations and the verdict on real studies (issue 38), run by `invoke study` against
the scripted test double (tests/servers/scripted_backend.py) on loopback, signed with real keys.

- a signed study writes preregistration.dsse.json before its first timed request and one Test Result per gate;
  an unsigned one writes neither;
- `verify` passes the untouched run and fails one whose recipe's gates were edited after pre-registration,
  summary recomputed and manifest re-signed with the same key, naming the gates;
- a rerun made slower by the double's added delay is NOT REPRODUCED (exit 3) by the pre-registered margins,
  and `--out` writes verdict.md and a signed verdict.dsse.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from invoking import invoke
from reprokit import resign
from studykit import scripted_backend, write_study

from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import read_rows
from openjev_repro.manifest import generate_keypair
from openjev_repro.manifest.attestations import signed_envelope, write_gate_attestations
from openjev_repro.results.energy import GPU_FILE, read_gpu_events
from openjev_repro.results.statistics import summarize
from openjev_repro.results.trace_gates import trace_inputs

pytestmark = pytest.mark.slow

MARGINS = {"basis": "test: a loopback double on one machine", "margins": {
    "mean": [0.9, 1.1], "p50": [0.9, 1.1], "p95": [0.8, 1.25], "decision_flips": 0, "max_probability_delta": 0.0}}
GATES = [{"name": "stable", "kind": "probabilities_stable", "workload": "mixed", "backend": "one"},
         {"name": "gpu", "kind": "gpu_not_throttled"}]


def _study(tmp: Path, name: str, delay_s: float, key: Path | None) -> Path:
    backend = scripted_backend("one")
    backend["env"]["SCRIPTED_DELAY_S"] = str(delay_s)
    recipe = write_study(tmp / name, [backend], n=12, gates=GATES, extra={"reproduction": MARGINS})
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp / name / "runs"),
                  *(["--key", str(key)] if key else []), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> tuple[Path, Path]:
    private, public, _ = generate_keypair(tmp_path_factory.mktemp("keys"))
    return private, public


@pytest.fixture(scope="module")
def original(tmp_path_factory, keys) -> Path:
    return _study(tmp_path_factory.mktemp("original"), "original", 0.05, keys[0])


def test_a_signed_study_preregisters_and_attests_its_gates(original, keys):
    assert (original / "preregistration.dsse.json").is_file()
    assert sorted(p.name for p in (original / "attestations").iterdir()) == ["gate-gpu.dsse.json",
                                                                             "gate-stable.dsse.json"]
    statement = json.loads((original / "manifest.dsse.json").read_text())
    import base64

    subjects = {s["name"] for s in json.loads(base64.b64decode(statement["payload"]))["subject"]}
    assert {"preregistration.dsse.json", "attestations/gate-stable.dsse.json"} <= subjects  # the manifest binds them
    proc = invoke("verify", "--run", str(original), "--pubkey", str(keys[1]))
    assert proc.returncode == 0, proc.stdout
    assert "PASS  pre-registration" in proc.stdout
    assert "PASS  gate attestations" in proc.stdout


def test_the_preregistration_is_written_before_the_first_timed_request(original):
    registered = (original / "preregistration.dsse.json").stat().st_mtime_ns
    first_row = (original / "rows.jsonl").stat().st_ctime_ns  # rows.jsonl is created by the first timed pass
    backend_log = original / "logs" / "one.log"
    assert registered <= first_row
    assert registered <= backend_log.stat().st_ctime_ns  # before the backend was even started


def test_an_unsigned_study_writes_no_preregistration(tmp_path):
    run = _study(tmp_path, "unsigned", 0.0, None)
    assert not (run / "preregistration.dsse.json").exists()
    assert not (run / "attestations").exists()


def test_gates_edited_after_preregistration_fail_verify(tmp_path, original, keys):
    """A cheat with the key: edit the gates, recompute the summary, sign a new manifest; the pre-registration
    still names the gates declared before the first timed request."""
    run = tmp_path / "edited"
    shutil.copytree(original, run)
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe["gates"] = recipe["gates"][:1]  # a gate dropped after the fact
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    summary = summarize(read_rows(run / "rows.jsonl"), parse_recipe((run / "recipe.yaml").read_text()),
                        gpu=read_gpu_events(run / GPU_FILE), **trace_inputs(run)).to_json()
    write_json_atomic(run / "summary.json", summary)
    shutil.rmtree(run / "attestations")
    write_gate_attestations(run, keys[0])  # the gates' attestations made anew too
    resign(run, keys[0])
    proc = invoke("verify", "--run", str(run), "--pubkey", str(keys[1]))
    assert proc.returncode == 1
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL ")]
    assert len(failed) == 1, proc.stdout
    assert "pre-registration" in failed[0] and "gates differ from the pre-registered ones" in failed[0]


def test_a_preregistration_signed_by_another_key_fails_verify(tmp_path, original, keys):
    run = tmp_path / "other-key"
    shutil.copytree(original, run)
    other, _, _ = generate_keypair(tmp_path / "other")
    from openjev_repro.evidence.recipe import load_recipe
    from openjev_repro.evidence.rundir import RunDir
    from openjev_repro.manifest.preregistration import write_preregistration

    (run / "preregistration.dsse.json").unlink()
    write_preregistration(RunDir(run), load_recipe(run / "recipe.yaml"),
                          json.loads((run / "plan.json").read_text())["case_ids"], other)
    resign(run, keys[0])
    proc = invoke("verify", "--run", str(run), "--pubkey", str(keys[1]))
    assert proc.returncode == 1
    assert "FAIL  pre-registration" in proc.stdout and "No signature by the given key" in proc.stdout


def test_a_slower_rerun_is_not_reproduced(tmp_path, original, keys):
    """The double answers 30 ms later (0.05 s -> 0.08 s of added delay: at least 30% slower overall)."""
    rerun = _study(tmp_path, "slower", 0.08, keys[0])
    out = tmp_path / "verdict"
    proc = invoke("reproduce", "--original", str(original), "--rerun", str(rerun), "--pubkey", str(keys[1]),
                  "--key", str(keys[0]), "--out", str(out))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Verdict: NOT REPRODUCED"
    assert "margins: the original's pre-registration" in proc.stdout
    mean = next(i for i, line in enumerate(lines) if line.strip().startswith("mean"))
    assert "NOT REPRODUCED" in lines[mean + 1] and "slower, outside [0.9, 1.1]" in lines[mean + 1]
    assert all(len(line) <= 80 for line in lines)
    assert (out / "verdict.md").read_text().count("Verdict: NOT REPRODUCED") == 1
    envelope = json.loads((out / "verdict.dsse.json").read_text())
    assert len(envelope["signatures"]) == 1
    again = invoke("reproduce", "--original", str(original), "--rerun", str(rerun), "--pubkey", str(keys[1]),
                   "--out", str(out))
    assert again.returncode == 1 and "already exists" in again.stderr  # a verdict never replaces one


def test_a_p95_from_too_few_requests_is_inconclusive(original, keys):
    """The original against itself: every ratio exactly 1, yet 24 requests per run give no order-statistic
    bounds of a P95 (59 needed), so the verdict is INCONCLUSIVE (exit 5), saying why."""
    proc = invoke("reproduce", "--original", str(original), "--rerun", str(original), "--pubkey", str(keys[1]))
    assert proc.returncode == 5, proc.stdout
    flat = " ".join(line.strip() for line in proc.stdout.splitlines())
    assert flat.startswith("Verdict: INCONCLUSIVE")
    assert "INCONCLUSIVE: needs >= 59 requests per run for its bounds, has 24" in flat
    assert flat.count("REPRODUCED: inside [0.9, 1.1]") == 2  # mean and P50


@pytest.mark.parametrize(("edit", "words"), [
    ("recipe", "recipe.yaml has sha256"),
    ("inputs", "the inputs inputs.json checked are not the pre-registered inputs lock"),
])
def test_a_recipe_or_inputs_changed_after_preregistration_fail_verify(tmp_path, original, keys, edit, words):
    run = tmp_path / "edited"
    shutil.copytree(original, run)
    if edit == "recipe":  # a comment only: the gates, protocol and margins stay as registered
        (run / "recipe.yaml").write_text("# edited after the fact\n" + (run / "recipe.yaml").read_text())
    else:
        lock = json.loads((run / "inputs.json").read_text())
        lock["files"][0]["actual"] = "0" * 64
        (run / "inputs.json").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    resign(run, keys[0])
    proc = invoke("verify", "--run", str(run), "--pubkey", str(keys[1]))
    assert proc.returncode == 1
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL ")]
    assert any("pre-registration" in line and words in line for line in failed), proc.stdout


def test_a_gate_attestation_that_contradicts_its_gate_fails_verify(tmp_path, original, keys):
    """An attestation re-signed with the study's key to say PASSED where the signed gate failed (no GPU here)."""
    import base64

    run = tmp_path / "attested"
    shutil.copytree(original, run)
    path = run / "attestations" / "gate-gpu.dsse.json"
    statement = json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))
    statement["predicate"]["result"] = "PASSED"
    path.write_bytes(signed_envelope(statement, keys[0]))
    resign(run, keys[0])
    proc = invoke("verify", "--run", str(run), "--pubkey", str(keys[1]))
    assert proc.returncode == 1
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL ")]
    assert len(failed) == 1 and "gate attestations" in failed[0], proc.stdout
    assert "gate-gpu.dsse.json: result 'PASSED', the signed gate says 'FAILED'" in failed[0]
