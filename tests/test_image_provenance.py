"""Image provenance and SBOM (issue 39 item 5): `invoke sbom` gives a CycloneDX document of an image's
Python environment from its lock, valid by cyclonedx-python-lib's own validator; `invoke build` writes an
SBOM (Python and Debian) and an SLSA provenance v1 statement beside the image, signed with --key. The
records of a build are checked against a real build record where dockerd runs (CI builds the offline
reference image first), and against a build record's shape here."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from openjev_repro.images import load_spec
from openjev_repro.images.debian import read_packages_lock
from openjev_repro.images.lockfile import read_lock
from openjev_repro.manifest.dsse import parse_envelope, verify_envelope
from openjev_repro.manifest.keys import generate_keypair, load_public_key

REPO = Path(__file__).resolve().parents[1]
REQUIRED = os.environ.get("OPENJEV_REQUIRE_DOCKER") == "1"


def _invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)


def _valid(text: str) -> dict:
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    return json.loads(text)


def test_sbom_of_the_hf_lock_is_valid_cyclonedx_with_every_pin_and_its_hashes(tmp_path):
    done = _invoke("sbom", "--backend", "hf")
    assert done.returncode == 0, done.stderr
    bom = _valid(done.stdout)
    pins = read_lock(load_spec("hf").lock_path).pins
    components = {c["name"]: c for c in bom["components"]}
    assert len(components) == len(pins) == len(bom["components"])
    torch = next(p for p in pins if p.name == "torch")
    assert components["torch"]["purl"] == f"pkg:pypi/torch@{torch.version}"
    assert [h["content"] for h in components["torch"]["hashes"]] == list(torch.sha256)
    assert bom["metadata"]["component"]["type"] == "container"
    assert _invoke("sbom", "--backend", "hf").stdout == done.stdout  # one lock, one document
    out = tmp_path / "hf.cdx.json"
    assert _invoke("sbom", "--backend", "hf", "--out", str(out)).returncode == 0
    again = _invoke("sbom", "--backend", "hf", "--out", str(out))
    assert again.returncode == 1 and again.stderr.startswith("error: ") and len(again.stderr.splitlines()) == 1


def _record(spec) -> dict:
    """A build record as images/build.py writes it (the fields the provenance reads, and a few more)."""
    return {"format_version": 1, "name": spec.name, "backend": spec.backend, "tag": spec.tag,
            "image_id": "sha256:" + "1" * 64, "repo_digests": [], "diff_ids": ["sha256:" + "2" * 64],
            "labels": {"org.opencontainers.image.revision": "abc123-dirty", "org.opencontainers.image.version": "0.1"},
            "built_at": "2026-12-04T19:00:00Z", "duration_s": 151.5, "offline": True,
            "rootfs_sha256": "2" * 64, "base_diff_id": "sha256:" + "3" * 64, "members": "x.json",
            "debian_release_date": "Sat, 11 Jul 2026 10:16:37 UTC"}


def test_build_records_hold_a_valid_sbom_and_a_signed_slsa_statement(tmp_path, monkeypatch):
    from openjev_repro.cli.identity import write_image_records
    from openjev_repro.images import provenance

    monkeypatch.setattr(provenance, "CACHE_DIR", tmp_path)
    spec = load_spec("reference", offline=True)
    private, public, _ = generate_keypair(tmp_path / "keys")
    write_image_records(spec, _record(spec), str(private), {"offline": True})
    bom = _valid((tmp_path / f"{spec.name}.cdx.json").read_text())
    names = {c["bom-ref"] for c in bom["components"]}
    debian = read_packages_lock(spec.directory / spec.debian.packages_lock)
    assert {f"deb:{n}" for n in debian} | {f"pypi:{p.name}" for p in read_lock(spec.lock_path).pins} == names
    assert bom["metadata"]["component"]["hashes"] == [{"alg": "SHA-256", "content": "1" * 64}]

    envelope = parse_envelope((tmp_path / f"{spec.name}.provenance.dsse.json").read_bytes())
    verify_envelope(envelope, load_public_key(public))
    statement = json.loads(base64.b64decode(envelope.payload))
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [{"name": spec.tag, "digest": {"sha256": "1" * 64}}]
    predicate = statement["predicate"]
    deps = {d["name"]: d for d in predicate["buildDefinition"]["resolvedDependencies"]}
    assert deps["base"]["digest"] == {"sha256": "3" * 64} and deps["openjev-repro"]["digest"] == {"gitCommit": "abc123"}
    from openjev_repro.hashing import hash_file

    assert deps["requirements.lock"]["digest"] == {"sha256": hash_file(spec.lock_path)}
    assert predicate["buildDefinition"]["internalParameters"]["dirty_tree"] is True
    assert predicate["runDetails"]["metadata"]["startedOn"] == "2026-12-04T18:57:28Z"
    sbom = next(b for b in predicate["runDetails"]["byproducts"] if b["name"] == "sbom")
    assert sbom["digest"]["sha256"] == hash_file(tmp_path / f"{spec.name}.cdx.json")

    write_image_records(spec, _record(spec), None, {"offline": True})  # no key: the statement, unsigned
    assert json.loads((tmp_path / f"{spec.name}.provenance.json").read_text())["subject"] == statement["subject"]


def test_build_refuses_a_bad_key_before_building(tmp_path):
    (tmp_path / "bad.key").write_text("not a key")
    done = _invoke("build", "--backend", "reference", "--offline", "--key", str(tmp_path / "bad.key"))
    assert done.returncode == 1 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1


def test_the_built_reference_image_has_its_sbom_and_provenance_beside_it():
    """After `invoke build --backend reference --offline` (CI's scripts/ci-docker.sh): the records name the image
    this checkout built. The image is looked up by the id its build record holds, not by its tag: on a daemon
    shared with another checkout the tag may name that checkout's build since (same layers, another id)."""
    import docker
    import msgspec

    from openjev_repro.errors import DockerError
    from openjev_repro.images import connect
    from openjev_repro.images.build import read_record, record_path
    from openjev_repro.images.provenance import BuildRecord, provenance_path, sbom_path

    spec = load_spec("reference", offline=True)
    if not (record_path(spec).is_file() and provenance_path(spec, signed=False).is_file()):
        (pytest.fail if REQUIRED else pytest.skip)(f"this checkout has not built {spec.tag} (no build record here)")
    built = msgspec.convert(read_record(spec.name), BuildRecord)
    try:
        image = connect(timeout_s=10).images.get(built.image_id)
    except (DockerError, docker.errors.ImageNotFound) as exc:
        (pytest.fail if REQUIRED else pytest.skip)(f"the reference image this checkout built is not here: {exc}")
    assert tuple(image.attrs["RootFS"]["Layers"]) == built.diff_ids
    statement = json.loads(provenance_path(spec, signed=False).read_text())
    assert statement["subject"][0]["digest"]["sha256"] == image.id.removeprefix("sha256:") == built.digest
    bom = _valid(sbom_path(spec).read_text())
    assert bom["metadata"]["component"]["version"] == image.id
