"""Cause 2 of issue 25: the trust anchor comes from the user. A key found inside the submission
or the run being verified is never trusted; `collect` takes --pubkey explicitly."""

from __future__ import annotations

import json
import sys

from advkit import invoke, one_error_line
from audit_kit import build_run, keypair

from openjev_repro.cluster.submission import Submission
from openjev_repro.manifest import write_manifest
from openjev_repro.manifest.keys import PUBLIC_KEY_NAME

REPO_KEYS = {"pubkey": PUBLIC_KEY_NAME, "python": sys.executable, "replicates": 2, "gpu_controls": False}


def _submission(tmp_path, signer, named_key):
    """Two complete replicates signed by `signer`, the submission naming `named_key` and holding signer's .pub."""
    sub = Submission.create(tmp_path / "subs", "audit-test", {
        **REPO_KEYS, "recipe": str(tmp_path / "recipe.yaml"), "recipe_sha256": "0" * 64, "key": str(named_key),
        "repo": str(tmp_path)})
    for k in (1, 2):
        run = build_run(sub.replicate_dir(k), seed=k)
        write_manifest(run.path, key_path=signer[0])
    (sub.path / PUBLIC_KEY_NAME).write_bytes(signer[1].read_bytes())
    return sub


def test_collect_never_trusts_the_key_inside_the_submission(tmp_path):
    lab, attacker = keypair(tmp_path / "lab"), keypair(tmp_path / "attacker")
    sub = _submission(tmp_path, attacker, lab[0])  # re-signed by the attacker, their key swapped in
    line = one_error_line(invoke("collect", "--submission", str(sub.path)))
    assert line.startswith("error: --pubkey FILE is required: the public key the evidence must be signed by comes "
                           "from you")
    inside = sub.path / PUBLIC_KEY_NAME
    line = one_error_line(invoke("collect", "--submission", str(sub.path), "--pubkey", str(inside)))
    assert line == (f"error: --pubkey {inside} lies inside {sub.path}, the material being verified; a key found "
                    "there is never trusted. Give the key you hold yourself.")
    line = one_error_line(invoke("collect", "--submission", str(sub.path), "--pubkey", str(lab[1])))
    assert line.startswith("error: replicate-1 (") and "does not verify: signature:" in line
    assert not list(sub.path.glob("collect-*"))  # nothing signed with the lab's key


def test_collect_signs_only_with_the_private_half_of_the_trusted_key(tmp_path):
    lab, attacker = keypair(tmp_path / "lab"), keypair(tmp_path / "attacker")
    sub = _submission(tmp_path, lab, attacker[0])  # honest runs; submission.json names another key
    line = one_error_line(invoke("collect", "--submission", str(sub.path), "--pubkey", str(lab[1])))
    assert line == (f"error: the key named in {sub.path / 'submission.json'} is not the private half of --pubkey "
                    f"{lab[1]}; give the key that signs the summary with --key.")
    data = json.loads((sub.path / "submission.json").read_text())
    data["key"] = str(lab[0])
    (sub.path / "submission.json").write_text(json.dumps(data))
    proc = invoke("collect", "--submission", str(sub.path), "--pubkey", str(lab[1]))
    assert proc.returncode == 0, proc.stderr
    [collected] = sub.path.glob("collect-*")
    assert (collected / "summary.dsse.json").is_file()


def test_verify_never_trusts_a_key_inside_the_run(tmp_path):
    private, public = keypair(tmp_path / "k")
    run = build_run(tmp_path / "runs")
    (run.path / "logs" / "my.pub").write_bytes(public.read_bytes())
    write_manifest(run.path, key_path=private)
    line = one_error_line(invoke("verify", "--run", str(run.path), "--pubkey", str(run.path / "logs" / "my.pub")))
    assert "lies inside" in line and "never trusted" in line


def test_verify_of_a_collection_whose_signed_subject_names_a_path_is_one_failed_check(tmp_path):
    """A validly signed summary whose subject is not a file of the directory (here `../x`, or not an object) is
    damaged evidence: a failed check, never a traceback and never a file hashed outside the collection."""
    from openjev_repro.manifest.dsse import envelope_bytes, make_envelope, parse_envelope, payload_of
    from openjev_repro.manifest.keys import load_private_key

    lab = keypair(tmp_path / "lab")
    sub = _submission(tmp_path, lab, lab[0])
    assert invoke("collect", "--submission", str(sub.path), "--pubkey", str(lab[1])).returncode == 0
    [collected] = sub.path.glob("collect-*")
    envelope_path = collected / "summary.dsse.json"
    statement = json.loads(payload_of(parse_envelope(envelope_path.read_bytes())))
    for subject in ({"name": "../x", "digest": {"sha256": "0" * 64}}, "summary.md"):
        statement["subject"][0] = subject
        envelope_path.write_bytes(envelope_bytes(make_envelope(json.dumps(statement).encode(),
                                                               load_private_key(lab[0]))))
        proc = invoke("verify", "--run", str(collected), "--pubkey", str(lab[1]))
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "collection signature and digests" in proc.stdout and "is not {name: a file of this directory" \
            in proc.stdout, proc.stdout
