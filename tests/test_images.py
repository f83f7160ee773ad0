"""Image pins, locks, wheelhouse checks, deterministic tars and source commits: no docker needed."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import socket
import sys
import time
import urllib.request
import tarfile
from pathlib import Path

import pytest

from openjev_repro.errors import DockerError, RecipeError, VerificationError
from openjev_repro.images import (IMAGES_DIR, PLACEHOLDER_DIGEST, build_dockerfile, check_commit, diff_members,
                                  fetch_source, labels_for, load_spec, normalize_tar, read_lock, read_members,
                                  verify_wheelhouse)
from openjev_repro.images.lock import Lock, Pin, write_lock
from openjev_repro.images.spec import backend_names
from openjev_repro.runtime.docker import container_argv, container_env

REPO = Path(__file__).resolve().parents[1]


# --- recipes and pins ----------------------------------------------------------------------

def test_every_image_recipe_loads_and_pins_sources_by_full_commit():
    assert backend_names() == ["fast", "hf", "native", "reference"]
    for name in backend_names():
        spec = load_spec(name)
        assert spec.kind == "dockerfile" and spec.gpu and spec.cuda_arch == "90"
        assert (spec.directory / spec.dockerfile).exists()
        assert spec.base.startswith("nvidia/cuda:13.0") and "@sha256:" in spec.base
    offline = load_spec("reference", offline=True)
    assert offline.kind == "rootfs" and offline.python == "3.11"


def test_unknown_backend_and_missing_offline_flavour_say_what_exists():
    with pytest.raises(RecipeError, match="Image backends: fast, hf, native, reference"):
        load_spec("vllm")
    with pytest.raises(RecipeError, match="only 'reference' has an offline"):
        load_spec("hf", offline=True)


def test_build_refuses_an_unresolved_base_digest_before_touching_docker(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # would fail differently if reached
    spec = load_spec("hf")
    assert spec.base_digest == PLACEHOLDER_DIGEST and not spec.base_resolved
    with pytest.raises(VerificationError, match="unresolved placeholder.*invoke lock --backend hf"):
        build_dockerfile(spec)


def test_build_refuses_a_partial_lock_even_with_a_resolved_digest(tmp_path):
    spec = load_spec("reference")
    write_lock(Lock([Pin("torch", "2.13.0", ("a" * 64,))], "partial", ["index unreachable"]), tmp_path / "r.lock",
               "test", "cp312")
    resolved = spec.model_copy(update={"base": spec.base.replace(PLACEHOLDER_DIGEST, "sha256:" + "1" * 64),
                                       "lock": str(tmp_path / "r.lock")})
    with pytest.raises(VerificationError, match="partial lock .*index unreachable"):
        build_dockerfile(resolved)


def test_labels_carry_every_pin():
    spec = load_spec("native")
    labels = labels_for(spec)
    assert labels["io.openjev-repro.source.native.commit"] == "202c0e163f868334a99d88407056ebe61dbb2dce"
    assert labels["io.openjev-repro.source.native-lib.commit"] == "ad1cb818d2ea001bbd8c84643e1a7241d0fc26c8"
    assert labels["io.openjev-repro.artifact.native-lib.sha256"].startswith("e033315d")
    assert labels["org.opencontainers.image.base.digest"] == PLACEHOLDER_DIGEST
    assert labels["org.opencontainers.image.created"] == "2026-07-11T10:16:37Z"


def test_offline_lock_is_complete_and_hash_pinned():
    lock = read_lock(load_spec("reference", offline=True).lock_path)
    assert lock.status == "complete"
    pins = lock.by_name()
    assert pins["torch"].version == "2.13.0+cpu" and pins["transformers"].version == "5.10.2"
    assert all(len(h) == 64 for p in lock.pins for h in p.sha256)


# --- wheelhouse ------------------------------------------------------------------------------

def _wheelhouse(tmp_path: Path, content: bytes = b"wheel bytes") -> tuple[Path, Path]:
    house = tmp_path / "wheels"
    house.mkdir()
    (house / "demo_pkg-1.0-py3-none-any.whl").write_bytes(content)
    lock = tmp_path / "requirements.lock"
    write_lock(Lock([Pin("demo-pkg", "1.0", (hashlib.sha256(b"wheel bytes").hexdigest(),))]), lock, "test", "any")
    return house, lock


def test_wheelhouse_matching_the_lock_passes(tmp_path):
    house, lock = _wheelhouse(tmp_path)
    assert list(verify_wheelhouse(lock, house)) == ["demo_pkg-1.0-py3-none-any.whl"]


def test_wheel_hash_mismatch_names_the_file_and_both_hashes(tmp_path):
    house, lock = _wheelhouse(tmp_path, content=b"tampered")
    with pytest.raises(VerificationError) as err:
        verify_wheelhouse(lock, house)
    assert "demo_pkg-1.0-py3-none-any.whl" in str(err.value)
    assert hashlib.sha256(b"tampered").hexdigest() in str(err.value)


def test_unlocked_and_missing_wheels_are_refused(tmp_path):
    house, lock = _wheelhouse(tmp_path)
    (house / "extra-2.0-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(VerificationError, match="extra-2.0.*does not pin"):
        verify_wheelhouse(lock, house)
    (house / "extra-2.0-py3-none-any.whl").unlink()
    (house / "demo_pkg-1.0-py3-none-any.whl").unlink()
    with pytest.raises(VerificationError, match="lacks demo-pkg"):
        verify_wheelhouse(lock, house)


def test_lock_without_hashes_is_refused(tmp_path):
    (tmp_path / "r.lock").write_text("torch==2.13.0\n")
    with pytest.raises(VerificationError, match="not pinned with == and --hash"):
        read_lock(tmp_path / "r.lock")


# --- deterministic tars -------------------------------------------------------------------

def _tar(path: Path, files: dict[str, bytes], mtime: int, reverse: bool = False, hardlink: bool = False) -> Path:
    with tarfile.open(path, "w") as tar:
        for name in sorted(files, reverse=reverse):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uname = len(files[name]), mtime, "someone"
            tar.addfile(info, io.BytesIO(files[name]))
        if hardlink:
            link = tarfile.TarInfo("usr/bin/linked")
            link.type, link.linkname, link.mtime = tarfile.LNKTYPE, "usr/bin/tool", mtime
            tar.addfile(link)
    return path


FILES = {"usr/bin/tool": b"binary", "etc/hostname": b"builder-1\n", "var/log/dpkg.log": b"today",
         "etc/shadow": b"root:*:20500:0:99999:7:::\n", "opt/venv/lib/a.py": b"print(1)\n"}


def test_normalized_tar_ignores_order_mtimes_and_build_state(tmp_path):
    epoch = 1783764997
    a = normalize_tar(_tar(tmp_path / "a.tar", FILES, 1900000000), tmp_path / "na.tar", epoch, tmp_path / "a.json")
    other = {**FILES, "etc/hostname": b"builder-2\n", "var/log/dpkg.log": b"tomorrow",
             "etc/shadow": b"root:*:20999:0:99999:7:::\n"}
    b = normalize_tar(_tar(tmp_path / "b.tar", other, 1950000000, reverse=True), tmp_path / "nb.tar", epoch, tmp_path / "b.json")
    assert a == b == hashlib.sha256((tmp_path / "na.tar").read_bytes()).hexdigest()
    members = read_members(tmp_path / "a.json")
    assert "var/log/dpkg.log" not in members and members["etc/hostname"]["sha256"] == hashlib.sha256(b"").hexdigest()
    assert {m["mtime"] for m in members.values()} == {epoch}
    with tarfile.open(tmp_path / "na.tar") as tar:
        assert tar.extractfile("etc/shadow").read() == f"root:*:{epoch // 86400}:0:99999:7:::\n".encode()


def test_hardlinks_become_copies_and_a_changed_file_is_named(tmp_path):
    epoch = 1783764997
    normalize_tar(_tar(tmp_path / "a.tar", FILES, 1, hardlink=True), tmp_path / "na.tar", epoch, tmp_path / "a.json")
    normalize_tar(_tar(tmp_path / "b.tar", {**FILES, "opt/venv/lib/a.py": b"print(2)\n"}, 1, hardlink=True),
                  tmp_path / "nb.tar", epoch, tmp_path / "b.json")
    a, b = read_members(tmp_path / "a.json"), read_members(tmp_path / "b.json")
    assert a["usr/bin/linked"]["sha256"] == hashlib.sha256(b"binary").hexdigest()
    assert [str(d) for d in diff_members(a, b)] == ["opt/venv/lib/a.py: differs in sha256"]
    assert read_members(tmp_path / "nb.tar") == b  # the manifest matches the tar it describes


# --- sources at pinned commits -------------------------------------------------------------

def _repo(path: Path) -> tuple[str, str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    run = lambda *a: subprocess.run(["git", *a], cwd=path, env=env, check=True, capture_output=True, text=True).stdout
    path.mkdir()
    run("init", "-q")
    (path / "f").write_text("one")
    run("add", "f"), run("commit", "-qm", "one")
    first = run("rev-parse", "HEAD").strip()
    (path / "f").write_text("two")
    run("commit", "-qam", "two")
    return first, run("rev-parse", "HEAD").strip()


def test_fetch_source_gets_exactly_the_pinned_commit(tmp_path):
    first, second = _repo(tmp_path / "up")
    assert fetch_source(f"file://{tmp_path / 'up'}", first, tmp_path / "co") == first
    assert (tmp_path / "co" / "f").read_text() == "one"
    with pytest.raises(VerificationError, match=f"is at commit {first}, but the image recipe pins {second}"):
        check_commit(tmp_path / "co", second, "open-jev")


def test_fetch_source_script_refuses_short_commits(tmp_path):
    first, _ = _repo(tmp_path / "up")
    script = IMAGES_DIR / "common" / "fetch-source.sh"
    done = subprocess.run(["sh", str(script), f"file://{tmp_path / 'up'}", first[:12], str(tmp_path / "co")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "not a full 40-hex commit" in done.stderr
    done = subprocess.run(["sh", str(script), f"file://{tmp_path / 'up'}", first, str(tmp_path / "co")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and first in done.stdout


def test_check_pins_script_refuses_the_placeholder():
    script = IMAGES_DIR / "common" / "check-pins.sh"
    done = subprocess.run(["sh", str(script), f"nvidia/cuda:13.0.1@{PLACEHOLDER_DIGEST}"], capture_output=True, text=True)
    assert done.returncode == 4 and "invoke lock" in done.stderr


# --- docker runtime pieces that need no daemon --------------------------------------------

def test_container_argv_listens_inside_and_uses_the_image_python():
    argv = ["/work/main/.venv/bin/python", "-m", "openjev_repro.backend", "--host", "127.0.0.1", "--port", "8791"]
    assert container_argv(argv) == ["python", "-m", "openjev_repro.backend", "--host", "0.0.0.0", "--port", "8791"]
    assert container_argv(["omni-jev", "--host=localhost"]) == ["omni-jev", "--host=0.0.0.0"]
    env = container_env({"OPEN_JEV_HOST": "127.0.0.1", "OMNI_JEV_BIND": "127.0.0.1:8080", "X": "1"})
    assert env["OPEN_JEV_HOST"] == "0.0.0.0" and env["OMNI_JEV_BIND"] == "0.0.0.0:8080" and env["X"] == "1"


def test_daemon_absent_says_how_to_start_it(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    done = subprocess.run([str(REPO / ".venv/bin/invoke"), "build", "--backend", "reference", "--offline"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"Cannot reach the Docker daemon at unix://{tmp_path}/no-docker.sock" in done.stderr
    assert "dockerd" in done.stderr and "--runtime local" in done.stderr and "Traceback" not in done.stderr


def test_docker_runtime_without_daemon_fails_clearly_and_local_still_works(tmp_path, monkeypatch):
    from openjev_repro.runtime import LaunchSpec, get_runtime

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    spec = LaunchSpec(name="t", argv=argv, env={}, host="127.0.0.1", port=port, log_path=tmp_path / "log",
                      image="openjev-repro/reference-cpu:offline", health_path="/")
    with pytest.raises(DockerError, match="Cannot reach the Docker daemon.*--runtime local"):
        get_runtime("docker").launch(spec)
    backend = get_runtime("local").launch(spec)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("the local runtime's server never answered")
    finally:
        assert backend.stop(grace_s=5).exited
