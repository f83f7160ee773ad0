"""A study that cannot start fails before any backend, in one line saying how to fix it, leaving no run directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from studykit import write_study

from openjev_repro.errors import ReproError
from openjev_repro.manifest.keys import generate_keypair
from openjev_repro.orchestrator.runner import StudyOptions, run_study

REPO = Path(__file__).resolve().parents[1]


def marker_backend(marker: Path) -> dict:
    """A backend whose start alone leaves a file behind: it must never run in these tests."""
    return {"name": "one", "command": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]}


@pytest.fixture
def study(tmp_path):
    marker = tmp_path / "backend-started"
    recipe = write_study(tmp_path, [marker_backend(marker)])
    return recipe, marker


def bad_keys(tmp_path: Path) -> dict[str, Path]:
    _private, public, _ = generate_keypair(tmp_path / "keys")
    garbage = tmp_path / "garbage.key"
    garbage.write_bytes(b"\xff\x00 not a key")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ecdsa = tmp_path / "ecdsa.key"
    ecdsa.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return {"public key": public, "garbage": garbage, "missing": tmp_path / "nope.key",
            "a directory": tmp_path / "keys", "ECDSA, not Ed25519": ecdsa}


def test_bad_key_fails_before_any_backend_and_leaves_no_run(study, tmp_path):
    recipe, marker = study
    for what, key in bad_keys(tmp_path).items():
        with pytest.raises(ReproError, match=r"^--key: .*(invoke keygen|Cannot read)") as caught:
            run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", key_path=key))
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 200, (what, caught.value)
        assert not (tmp_path / "runs").exists(), what
        assert not marker.exists(), what


def test_cli_study_with_bad_key_is_one_error_line_and_no_run(study, tmp_path):
    recipe, marker = study
    key = tmp_path / "bad.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    done = subprocess.run([sys.executable, "-m", "invoke", "study", "--recipe", str(recipe), "--key", str(key),
                           "--out", str(tmp_path / "runs")], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [(f"error: --key: {key} is not an unencrypted PEM private key; "
                                        "create one with `invoke keygen`.")]
    assert not (tmp_path / "runs").exists() and not marker.exists()


def test_unwritable_or_non_directory_out(study, tmp_path):
    recipe, marker = study
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out in (afile, afile / "runs"):
        with pytest.raises(ReproError, match="is not a directory; choose a folder"):
            run_study(StudyOptions(recipe_path=recipe, out_dir=out))
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ReproError, match="is not writable"):
            run_study(StudyOptions(recipe_path=recipe, out_dir=locked / "runs"))
    assert not marker.exists()


def test_fixed_port_in_use(tmp_path):
    marker = tmp_path / "backend-started"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        recipe = write_study(tmp_path, [{**marker_backend(marker), "port": port}])
        with pytest.raises(ReproError, match=rf"Port {port}, fixed for one in the recipe, is in use; stop what holds it"):
            run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists() and not marker.exists()


def test_docker_runtime_without_a_daemon(study, tmp_path, monkeypatch):
    recipe, marker = study
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    with pytest.raises(ReproError, match="names no image"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", runtime="docker"))
    recipe.write_text(recipe.read_text().replace("- name: one\n", "- name: one\n  image: openjev/none:latest\n"))
    with pytest.raises(ReproError, match=r"^--runtime docker: Cannot reach the Docker daemon"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", runtime="docker"))
    with pytest.raises(ReproError, match="--runtime 'podman' is not one of local, docker"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", runtime="podman"))
    assert not (tmp_path / "runs").exists() and not marker.exists()


def test_missing_demo_inputs_name_the_fix(tmp_path, monkeypatch):
    from openjev_repro.orchestrator.preflight import check_inputs_present, input_fix
    from openjev_repro.study.resolved import resolve_recipe

    demo = REPO / "recipes" / "demo.yaml"
    with pytest.raises(ReproError) as caught:
        check_inputs_present(resolve_recipe(demo, inputs_root_override=tmp_path / "empty"))
    assert str(caught.value) == (f"all 11 inputs are missing under {tmp_path / 'empty'}; "
                                 f"`invoke fixture --out {tmp_path / 'empty'}` writes them.")
    monkeypatch.chdir(REPO)
    assert input_fix(resolve_recipe(demo, inputs_root_override=REPO / ".cache" / "demo")) == (
        "`make demo` builds them, or `invoke fixture --out .cache/demo` writes them")
    prepared = REPO / "recipes" / "open-jev-h200-hf-comparison-2026-10-03.yaml"
    assert input_fix(resolve_recipe(prepared, inputs_root_override=tmp_path, apply_lock=False)).startswith(f"`invoke prepare --recipe {prepared}`")
