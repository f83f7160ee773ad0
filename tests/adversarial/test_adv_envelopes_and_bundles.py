"""Envelopes with no room to respell, bundles whose headers are exactly what publish writes, and publish
that carries only a verified, signed run into a bundle, byte for byte the same each time (issue 40 items
3, 4 and 8).

Real runs signed with real keys (audit_kit), the real `invoke verify`, `collect` and `publish` as
subprocesses, and bundles rewritten with Python's tarfile the way a hostile publisher would.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import time
from pathlib import Path

import pytest
from advkit import invoke, one_error_line
from audit_kit import keypair, signed_run
from test_adv_trust_anchors import _submission

from openjev_repro.errors import VerificationError
from openjev_repro.manifest.dsse import envelope_bytes, make_envelope, parse_envelope

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def respelled(text: str) -> str:
    """The same bytes in another base64 spelling: a padding bit of the last character set."""
    assert text.endswith("="), "only a padded base64 string has padding bits"
    at = len(text.rstrip("=")) - 1
    spelled = text[:at] + _ALPHABET[_ALPHABET.index(text[at]) ^ 1] + text[at + 1:]
    assert base64.b64decode(spelled) == base64.b64decode(text) and spelled != text
    return spelled


def _respell_signature(path: Path) -> None:
    envelope = json.loads(path.read_text())
    envelope["signatures"][0]["sig"] = respelled(envelope["signatures"][0]["sig"])  # 64 bytes: "==" padding
    path.write_bytes(envelope_bytes(envelope))


# --- item 3: canonical base64 ---------------------------------------------------------------------


def test_a_respelled_signature_of_a_run_fails_verify(tmp_path):
    run, _, public = signed_run(tmp_path)
    _respell_signature(run.path / "manifest.dsse.json")
    proc = invoke("verify", "--run", str(run.path), "--pubkey", str(public))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (f"FAIL  envelope  {run.path}/manifest.dsse.json: a signature is not canonical base64 (decoded and encoded "
            "again it differs); it was re-spelled.") in proc.stdout, proc.stdout
    assert "VERIFIED" not in proc.stdout


def test_a_respelled_payload_is_refused():
    envelope = make_envelope(b"ab", None).to_json()  # two bytes: one "=" of padding, two padding bits
    envelope["payload"] = respelled(envelope["payload"])
    with pytest.raises(VerificationError, match="^e: payload is not canonical base64"):
        parse_envelope(envelope_bytes(envelope), "e")


def test_a_respelled_signature_of_a_collect_summary_fails_verify(tmp_path):
    lab = keypair(tmp_path / "lab")
    sub = _submission(tmp_path, lab, lab[0])
    assert invoke("collect", "--submission", str(sub.path), "--pubkey", str(lab[1])).returncode == 0
    [collected] = sub.path.glob("collect-*")
    _respell_signature(collected / "summary.dsse.json")
    proc = invoke("verify", "--run", str(collected), "--pubkey", str(lab[1]))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert ("FAIL  collection signature and digests  summary.dsse.json: a signature is not canonical base64"
            in proc.stdout), proc.stdout


# --- item 4: bundle headers -----------------------------------------------------------------------


def _bundle(tmp_path: Path) -> tuple[Path, Path]:
    run, private, public = signed_run(tmp_path)
    bundle = tmp_path / "b.tar.gz"
    assert invoke("publish", "--run", str(run.path), "--out", str(bundle), "--key", str(private)).returncode == 0
    return bundle, public


def _rewrite(bundle: Path, out: Path, edit) -> Path:
    """The bundle's members, in order and with their bytes, each header passed through `edit`."""
    data = io.BytesIO()
    with tarfile.open(bundle, "r:gz") as src, tarfile.TarFile(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in src.getmembers():
            content = src.extractfile(member).read()
            edit(member)
            tar.addfile(member, io.BytesIO(content))
    out.write_bytes(gzip.compress(data.getvalue(), mtime=0))
    return out


def _set_uid(m: tarfile.TarInfo) -> None:
    m.mode = 0o6777


def _owner(m: tarfile.TarInfo) -> None:
    m.uid = m.gid = 65534


def _year_2100(m: tarfile.TarInfo) -> None:
    m.mtime = 4102444800


@pytest.mark.parametrize(("edit", "detail"), [
    (_set_uid, "mode 6777 is not the 0644 publish writes"),
    (_owner, "uid 65534 is not the 0 publish writes"),
    (_year_2100, "mtime 4102444800 is not the 0 publish writes"),
], ids=["mode 06777", "uid 65534", "mtime 2100"])
def test_bundle_members_must_have_the_headers_publish_writes(tmp_path, edit, detail):
    bundle, public = _bundle(tmp_path)
    assert invoke("verify", "--run", str(bundle), "--pubkey", str(public)).returncode == 0
    forged = _rewrite(bundle, tmp_path / "forged.tar.gz", edit)
    proc = invoke("verify", "--run", str(forged), "--pubkey", str(public))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"FAIL  bundle  {forged} is not a bundle as publish writes it: header at byte 0: {detail}" \
        in proc.stdout, proc.stdout
    assert "VERIFIED" not in proc.stdout


def test_a_nul_byte_in_a_pax_path_is_a_failed_check(tmp_path):
    bundle, public = _bundle(tmp_path)

    def nul(m: tarfile.TarInfo) -> None:
        if m.name == "rows.jsonl":
            m.pax_headers = {"path": "summary.json\x00rows.jsonl"}

    forged = _rewrite(bundle, tmp_path / "forged.tar.gz", nul)
    proc = invoke("verify", "--run", str(forged), "--pubkey", str(public))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "holds a NUL or another control character; GNU tar could extract other files than verify reads" \
        in proc.stdout, proc.stdout


# --- item 8: publish verifies the run's signature; two publishes are one set of bytes --------------


def test_publish_refuses_a_run_whose_signature_does_not_verify(tmp_path):
    run, private, _public = signed_run(tmp_path)
    envelope = json.loads((run.path / "manifest.dsse.json").read_text())
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[0] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    (run.path / "manifest.dsse.json").write_bytes(envelope_bytes(envelope))
    out = tmp_path / "b.tar.gz"
    line = one_error_line(invoke("publish", "--run", str(run.path), "--out", str(out), "--key", str(private)))
    assert line.startswith(f"error: {run.path} does not verify (signature: The signature by key ")
    assert line.endswith("does not match the payload.); only verified runs are published.")
    assert not out.exists()


def test_publish_refuses_a_signed_run_it_has_no_key_to_check(tmp_path):
    run, _, _ = signed_run(tmp_path)
    other = keypair(tmp_path / "other")
    out = tmp_path / "b.tar.gz"
    line = one_error_line(invoke("publish", "--run", str(run.path), "--out", str(out), "--key", str(other[0])))
    assert "pass --pubkey with that public key so publish can check the signature" in line and not out.exists()


def test_two_publishes_of_one_run_are_byte_identical(tmp_path):
    run, private, _ = signed_run(tmp_path)
    one, two = tmp_path / "one.tar.gz", tmp_path / "two.tar.gz"
    assert invoke("publish", "--run", str(run.path), "--out", str(one), "--key", str(private)).returncode == 0
    time.sleep(1.1)  # another second on the clock
    assert invoke("publish", "--run", str(run.path), "--out", str(two), "--key", str(private)).returncode == 0
    assert one.read_bytes() == two.read_bytes()
