"""Image pins, locks, wheelhouse checks, deterministic tars and source commits: no docker needed."""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

from openjev_repro.errors import DockerError, RecipeError, VerificationError
from openjev_repro.images import (
    IMAGES_DIR,
    PLACEHOLDER_DIGEST,
    build_dockerfile,
    build_offline,
    check_commit,
    diff_members,
    fetch_source,
    labels_for,
    load_spec,
    normalize_tar,
    read_lock,
    read_members,
    verify_wheelhouse,
)
from openjev_repro.images.build import _context, source_layer_dockerfile, source_tag
from openjev_repro.images.lockfile import Lock, Pin, link_from_pool, normalise, pip_env, write_lock
from openjev_repro.images.spec import ImageSource, backend_names
from openjev_repro.runtime.docker import container_argv, container_env

REPO = Path(__file__).resolve().parents[1]


# --- recipes and pins ----------------------------------------------------------------------

def test_every_image_recipe_loads_and_builds_from_the_debian_base():
    assert backend_names() == ["fast", "hf", "native", "reference"]
    reference = load_spec("reference", offline=True)
    assert reference.kind == "rootfs" and reference.python == "3.11" and not reference.gpu
    base_lock = reference.directory / reference.debian.packages_lock
    for name in ("hf", "fast", "native"):
        spec = load_spec(name)
        assert spec.gpu and spec.cuda_arch == "90" and spec.base is None and spec.index == "pypi"
        assert (spec.directory / spec.debian.packages_lock).resolve() == base_lock.resolve()
        assert spec.debian == reference.debian.model_copy(update={"packages_lock": spec.debian.packages_lock})
        assert all(len(s.commit) == 40 for s in spec.sources)
    assert load_spec("hf", offline=True) == load_spec("hf") and load_spec("hf").kind == "rootfs"
    assert load_spec("native").kind == "dockerfile" and load_spec("native").source_required
    assert load_spec("reference") == reference  # no registry-based reference image any more


def test_no_image_file_holds_a_placeholder_digest():
    offenders = [str(p.relative_to(REPO)) for p in IMAGES_DIR.rglob("*") if p.is_file()
                 and ("0" * 64 in p.read_text(errors="replace") or "nvidia/cuda" in p.read_text(errors="replace"))]
    assert offenders == []


def test_unknown_backend_and_missing_offline_flavour_say_what_exists():
    with pytest.raises(RecipeError, match="Image backends: fast, hf, native, reference"):
        load_spec("vllm")
    with pytest.raises(RecipeError, match="native.*no offline build.*offline.*builds are: fast, hf, reference"):
        load_spec("native", offline=True)


def test_build_refuses_an_unresolved_base_digest_before_touching_docker(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # would fail differently if reached
    spec = load_spec("native").model_copy(update={"debian": None, "base": f"example/cuda:13@{PLACEHOLDER_DIGEST}"})
    assert not spec.base_resolved
    with pytest.raises(VerificationError, match="unresolved placeholder.*invoke lock --backend native"):
        build_dockerfile(spec)


def test_build_refuses_a_partial_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    write_lock(Lock([Pin("torch", "2.13.0", ("a" * 64,))], "partial", ["index unreachable"]), tmp_path / "r.lock",
               "test", "cp311")
    spec = load_spec("hf").model_copy(update={"lock": str(tmp_path / "r.lock")})
    with pytest.raises(VerificationError, match="partial lock .*index unreachable"):
        build_offline(spec)


def test_native_build_without_source_refuses_in_one_line_before_docker(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    done = subprocess.run([str(REPO / ".venv/bin/invoke"), "build", "--backend", "native"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: --source is required for the native image") and done.stderr.count("\n") == 1
    with pytest.raises(VerificationError, match="compiles upstream code: give --source"):
        build_dockerfile(load_spec("native"))


def test_labels_carry_every_pin():
    spec = load_spec("native")
    labels = labels_for(spec)
    assert labels["io.openjev-repro.source.native.commit"] == "202c0e163f868334a99d88407056ebe61dbb2dce"
    assert labels["io.openjev-repro.source.native-lib.commit"] == "ad1cb818d2ea001bbd8c84643e1a7241d0fc26c8"
    assert labels["io.openjev-repro.artifact.native-lib.sha256"].startswith("e033315d")
    assert "org.opencontainers.image.base.digest" not in labels  # the base is ours, named by its diff ID
    assert labels["org.opencontainers.image.created"] == "2026-07-11T10:16:37Z"


# --- GPU locks: the published CUDA 13 stack from PyPI ----------------------------------------

CUDA_STACK = {"torch": "2.13.0", "triton": "3.7.1", "nvidia-cudnn-cu13": "9.20.0.48", "nvidia-nccl-cu13": "2.29.7",
              "nvidia-cusparselt-cu13": "0.8.1", "nvidia-nvshmem-cu13": "3.4.5", "transformers": "5.10.2",
              "peft": "0.19.1", "accelerate": "1.13.0"}


@pytest.mark.parametrize("backend", ["hf", "fast"])
def test_gpu_locks_are_complete_and_hold_the_published_cuda_stack(backend):
    spec = load_spec(backend)
    lock = read_lock(spec.lock_path)
    pins = lock.by_name()
    assert lock.status == "complete" and lock.notes == []
    assert {name: pins[name].version for name in CUDA_STACK} == CUDA_STACK
    assert all(len(p.sha256) >= 1 and all(len(h) == 64 for h in p.sha256) for p in lock.pins)
    assert "target: cp311 manylinux_2_28_x86_64" in spec.lock_path.read_text()
    # the package itself runs in the image (reference backend, environment capture): every dependency is locked
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {normalise(d.split(">")[0].split("=")[0].split("<")[0].strip()) for d in deps}
    assert names <= set(pins), names - set(pins)


def test_fast_lock_is_hf_plus_fla_with_identical_hashes():
    hf, fast = read_lock(load_spec("hf").lock_path).by_name(), read_lock(load_spec("fast").lock_path).by_name()
    assert {k: v for k, v in fast.items() if k in hf} == hf
    extra = {k: fast[k].version for k in set(fast) - set(hf)}
    assert extra["fla-core"] == "0.5.2" and extra["flash-linear-attention"] == "0.5.2"


def test_native_lock_is_nvcc_13_0_88_with_its_compiler_parts_from_the_same_release():
    pins = read_lock(load_spec("native").lock_path).by_name()
    assert pins["nvidia-cuda-nvcc"].version == "13.0.88"
    assert all(p.version.startswith("13.0.") for p in pins.values()), {k: p.version for k, p in pins.items()}


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


def test_pypi_only_pip_ignores_every_host_setting(tmp_path, monkeypatch):
    """The GPU locks must not see this host's CPU torch (find-links, local indexes, torch cap)."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /opt/wheels-of-this-host\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels-of-this-host")
    show = [sys.executable, "-m", "pip", "config", "list"]
    host = subprocess.run(show, capture_output=True, text=True, env=pip_env(False), check=True).stdout
    assert "wheels-of-this-host" in host
    isolated = pip_env(True)
    assert isolated["PIP_CONFIG_FILE"] == os.devnull and "PIP_FIND_LINKS" not in isolated
    seen = subprocess.run(show, capture_output=True, text=True, env=isolated, check=True).stdout
    assert "wheels-of-this-host" not in seen and not re.search("find-links|constraint|index-url", seen), seen


def _wheel(directory: Path, name: str, content: bytes) -> str:
    directory.mkdir(exist_ok=True)
    (directory / name).write_bytes(content)
    return hashlib.sha256(content).hexdigest()


def test_wheelhouse_is_hard_linked_from_the_shared_pool(tmp_path):
    pool, house = tmp_path / "pool", tmp_path / "house"
    a = _wheel(pool, "alpha-1.0-py3-none-any.whl", b"alpha")
    b = _wheel(pool, "beta-2.0-py3-none-any.whl", b"beta")
    _wheel(pool, "alpha-0.9-py3-none-any.whl", b"old alpha")   # another image's version
    _wheel(pool, "gamma-1.0-py3-none-any.whl", b"gamma")       # not pinned here
    _wheel(house, "stale-1.0-py3-none-any.whl", b"stale")      # left from an older lock
    lock = tmp_path / "requirements.lock"
    write_lock(Lock([Pin("alpha", "1.0", (a,)), Pin("beta", "2.0", (b,))]), lock, "test", "any")
    link_from_pool(read_lock(lock), pool, house)
    assert sorted(p.name for p in house.iterdir()) == ["alpha-1.0-py3-none-any.whl", "beta-2.0-py3-none-any.whl"]
    assert (house / "alpha-1.0-py3-none-any.whl").stat().st_ino == (pool / "alpha-1.0-py3-none-any.whl").stat().st_ino
    assert list(verify_wheelhouse(lock, house)) == ["alpha-1.0-py3-none-any.whl", "beta-2.0-py3-none-any.whl"]
    (pool / "beta-2.0-py3-none-any.whl").unlink()
    link_from_pool(read_lock(lock), pool, house)  # a pool without the pin: the wheelhouse check names it
    with pytest.raises(VerificationError, match="lacks beta"):
        verify_wheelhouse(lock, house)


# --- upstream sources: the source layer and the native build context ------------------------

def test_source_layer_installs_each_pinned_source_offline_and_says_so():
    spec = load_spec("fast")
    text = source_layer_dockerfile(spec, "sha256:" + "e" * 64)
    assert text.splitlines()[0] == "FROM sha256:" + "e" * 64
    assert "COPY open-jev-fast/ /opt/src/open-jev-fast/" in text
    assert "--no-index --no-deps --no-build-isolation" in text and "cp -r /opt/src/open-jev-fast /tmp/build-open-jev-fast" in text
    assert '"io.openjev-repro.source.open-jev-fast.included"="yes"' in text
    assert 'OPENJEV_REPRO_UPSTREAM_SOURCE="open-jev-fast@c52b8bb958c1f0d241d4eb7fce4ecd8d885bf1e4"' in text
    assert source_tag(spec) == "openjev-repro/fast:c52b8bb"


def test_native_context_holds_the_pinned_trees_not_the_checked_out_one(tmp_path):
    first, second = _repo(tmp_path / "up")
    (tmp_path / "up" / "untracked").write_text("not in any commit")
    spec = load_spec("native").model_copy(update={"sources": [
        ImageSource(name="native", url="file:///up", commit=second), ImageSource(name="native-lib", url="file:///up", commit=first)]})
    subprocess.run(["git", "checkout", "-q", first], cwd=tmp_path / "up", check=True)
    with tarfile.open(fileobj=_context(spec, source=tmp_path / "up")) as tar:
        names = tar.getnames()
        assert tar.extractfile("src/native/f").read() == b"two" and tar.extractfile("src/native-lib/f").read() == b"one"
        assert {m.mtime for m in tar.getmembers() if m.name.startswith("src/")} == {spec.source_date_epoch}
    assert "images/native/Dockerfile" in names and "images/common/check-one-sha256.sh" in names
    assert not any("untracked" in n or "/.git" in n for n in names)
    missing = "1" * 40
    spec = spec.model_copy(update={"sources": [ImageSource(name="native", url="file:///up", commit=missing)]})
    with pytest.raises(VerificationError, match=f"does not hold commit {missing}"):
        _context(spec, source=tmp_path / "up")
    with pytest.raises(VerificationError, match="not a git checkout"):
        _context(spec, source=tmp_path)


def test_native_library_check_wants_exactly_one_library_with_the_published_hash(tmp_path):
    script = IMAGES_DIR / "common" / "check-one-sha256.sh"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libq.so").write_bytes(b"library")
    good = hashlib.sha256(b"library").hexdigest()
    def run(sha: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", str(script), str(tmp_path / "lib"), "*.so", sha], capture_output=True, text=True, check=False)

    assert run(good).returncode == 0
    bad = run("e033315d4c67127809e62f41d991a149ac8ee0ce81827997af063815fd00d435")
    assert bad.returncode == 5 and good in bad.stderr and "not the published one" in bad.stderr
    (tmp_path / "lib" / "libother.so").write_bytes(b"x")
    two = run(good)
    assert two.returncode == 7 and "found 2" in two.stderr


def test_native_dockerfile_stages_and_toolchain_pins():
    text = (IMAGES_DIR / "native" / "Dockerfile").read_text()
    stages = re.findall(r"(?m)^FROM (\S+) AS (\w+)$", text)
    assert stages == [("${BASE_IMAGE}", "toolchain"), ("toolchain", "build"), ("${BASE_IMAGE}", "runtime")]
    runtime = text.split("AS runtime", 1)[1]
    copies = re.findall(r"(?m)^COPY (--from=\w+ )?(\S+)", runtime)
    cuda_lib = "/opt/cuda/lib/python3.11/site-packages/nvidia/cu13/lib/"
    assert copies == [("--from=build ", "/opt/native"), ("--from=toolchain ", cuda_lib),
                      ("", "images/common/check-one-sha256.sh")]
    assert 'check-one-sha256.sh /opt/native/lib \'*.so\' "${NATIVE_LIB_SHA256}"' in runtime
    assert 'NVCC_APPEND_FLAGS="${NVCC_FLAGS} -arch=sm_${CUDA_ARCH}"' in text
    spec = load_spec("native")
    assert spec.build_args["NVCC_FLAGS"] == "-O3 -std=c++17 -lineinfo" and spec.build_args["NVCC_VERSION"] == "13.0.88"
    # the Dockerfile's own sed turns toolchain.lock into apt-get's package=version arguments
    sed = re.search(r"\$\((sed [^)]*) /opt/build/toolchain.lock\)", text).group(1)
    done = subprocess.run(f"{sed} {IMAGES_DIR / 'native' / 'toolchain.lock'}", shell=True, capture_output=True, text=True, check=False)
    args = done.stdout.split()
    assert done.returncode == 0 and "g++=4:12.2.0-3" in args and any(a.startswith("rustc-web=1.") for a in args)
    assert all(re.fullmatch(r"[a-z0-9+.-]+=[^=\s]+", a) for a in args), args


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
    def run(*a):
        return subprocess.run(["git", *a], cwd=path, env=env, check=True, capture_output=True, text=True).stdout
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
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert f"Cannot reach the Docker daemon at unix://{tmp_path}/no-docker.sock" in done.stderr
    assert "dockerd" in done.stderr and "--runtime local" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow  # starts a local backend through the runtime (the rule cannot see the method call)
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


def test_demo_recipe_for_another_image_changes_only_the_images(tmp_path, monkeypatch):
    from openjev_repro.cli.demo import DEMO_INPUTS, DEMO_RECIPE, recipe_with_image
    from openjev_repro.evidence.recipe import inputs_root, load_recipe

    monkeypatch.chdir(REPO)  # DEMO_INPUTS is relative to the repository, as `invoke demo` runs
    path = recipe_with_image("openjev-repro/hf:env", tmp_path)
    original, copy = load_recipe(REPO / DEMO_RECIPE), load_recipe(path)
    assert {b.image for b in copy.backends} == {"openjev-repro/hf:env"}
    assert inputs_root(path, copy) == (REPO / DEMO_INPUTS).resolve() == inputs_root(REPO / DEMO_RECIPE, original)
    def strip(recipe):
        return recipe.model_dump(exclude={"backends": {"__all__": {"image"}}, "inputs": {"root"}})

    assert strip(copy) == strip(original)


def test_a_debian_relock_reaches_every_image_on_that_base():
    from openjev_repro.images.relock import sharing_recipes

    lock = IMAGES_DIR / "reference" / "offline" / "debian-packages.lock"
    assert [p.relative_to(IMAGES_DIR).as_posix() for p in sharing_recipes(lock)] == [
        "fast/image.yaml", "hf/image.yaml", "native/image.yaml", "reference/offline/image.yaml"]
    assert sharing_recipes(IMAGES_DIR / "hf" / "requirements.lock") == []


def _pure_wheel(directory: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel, as a build backend writes one."""
    import zipfile

    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "", f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
    return path


@pytest.mark.slow  # runs pip's own install --dry-run: tests/tiers.py's rule does not see it
def test_a_pin_comes_from_pips_own_install_report(tmp_path, monkeypatch):
    """pip resolves from a local wheel folder (no index): the pin's name, version and sha256 are read from the
    report pip writes, decoded into its type."""
    from openjev_repro.images.lockfile import resolve

    wheel = _pure_wheel(tmp_path, "tiny_pkg", "1.2.3")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    [pin] = resolve(["tiny_pkg==1.2.3"])
    assert pin == Pin("tiny-pkg", "1.2.3", (hashlib.sha256(wheel.read_bytes()).hexdigest(),))


def test_installed_packages_are_the_stanzas_dpkg_marks_installed(tmp_path):
    from openjev_repro.images.debian import installed_packages

    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text("Package: zlib1g\nStatus: install ok installed\nVersion: 1:1.2.13\nDescription: zlib\n"
                      " continued: line\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
                      "Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b2\n")
    assert installed_packages(tmp_path) == {"bash": "5.2.15-2+b2", "zlib1g": "1:1.2.13"}


def test_docker_inspect_is_read_through_its_type():
    """The parts of `docker image inspect` a study records; null and absent fields as the daemon gives them."""
    import msgspec

    from openjev_repro.images.inspect import ImageInspect

    doc = {"Id": "sha256:ab", "RepoDigests": ["r@sha256:cd"], "Config": {"Labels": None, "Env": ["A=1"]},
           "RootFS": {"Type": "layers", "Layers": ["sha256:01", "sha256:02"]}}
    inspected = msgspec.convert(doc, ImageInspect)
    assert (inspected.repo_digests, inspected.root_fs.layers, inspected.config.labels) == (
        ["r@sha256:cd"], ["sha256:01", "sha256:02"], None)
    empty = msgspec.convert({"Id": "sha256:ab"}, ImageInspect)
    assert (empty.repo_digests, empty.root_fs.layers, empty.config.labels) == ([], [], None)
