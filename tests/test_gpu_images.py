"""The GPU images built from our Debian base, against a real dockerd (CPU only: no NVIDIA driver here).

Skipped (with the reason) where dockerd or an image is absent; with OPENJEV_REQUIRE_GPU_IMAGES=1
(set where the images were built) a missing image fails instead."""

from __future__ import annotations

import os
import uuid

import docker
import pytest

from openjev_repro.errors import DockerError
from openjev_repro.images import load_spec, read_lock
from openjev_repro.images.inspect import describe_image

pytestmark = pytest.mark.docker

REQUIRED = os.environ.get("OPENJEV_REQUIRE_GPU_IMAGES") == "1"
TORCH_CHECK = "import torch; print(torch.__version__, torch.version.cuda)"


def _client():
    from openjev_repro.images import connect

    try:
        return connect(timeout_s=10)
    except DockerError as exc:
        (pytest.fail if REQUIRED else pytest.skip)(f"dockerd is not reachable: {exc}")


def _image(client, ref: str, how: str) -> str:
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        (pytest.fail if REQUIRED else pytest.skip)(f"image {ref} is absent; build it with `{how}`")
    return ref


def _run(client, image: str, argv: list[str]) -> str:
    return client.containers.run(image, argv, remove=True, network_mode="none").decode().strip()


@pytest.mark.parametrize("backend", ["hf", "fast"])
def test_environment_image_has_the_cuda_13_torch_and_exactly_the_locked_packages(backend):
    client = _client()
    spec = load_spec(backend)
    image = _image(client, spec.tag, f"invoke build --backend {backend} --offline")
    assert _run(client, image, ["python", "-c", TORCH_CHECK]) == "2.13.0+cu130 13.0"
    described = describe_image(client, image)
    assert described["id"].startswith("sha256:") and len(described["diff_ids"]) == 1
    python = described["python"]
    assert python["available"] and python["python"].startswith("3.11.")
    assert python["torch"] == {"version": "2.13.0+cu130", "cuda": "13.0"}
    locked = {name: pin.version for name, pin in read_lock(spec.lock_path).by_name().items()}
    installed = {name.replace("_", "-").replace(".", "-"): version for name, version in python["packages"].items()}
    assert installed == locked  # every distribution in the image, each at its locked version, nothing else
    # (the distribution is torch 2.13.0; at run time the PyPI wheel calls itself 2.13.0+cu130, as published)
    labels = described["labels"]
    source = spec.sources[0]
    assert labels[f"io.openjev-repro.source.{source.name}.included"] == "no"
    assert labels[f"io.openjev-repro.source.{source.name}.commit"] == source.commit
    env = client.images.get(image).attrs["Config"]["Env"]
    assert "OPENJEV_REPRO_UPSTREAM_SOURCE=none" in env


def test_fast_image_imports_fla_without_a_gpu():
    client = _client()
    image = _image(client, load_spec("fast").tag, "invoke build --backend fast --offline")
    out = _run(client, image, ["python", "-c", "import fla, triton; print(fla.__version__, triton.__version__)"])
    assert out.splitlines()[-1] == "0.5.2 3.7.1"


def test_native_toolchain_compiles_for_sm90_with_the_published_flags():
    """Our own one-line kernel (no upstream code): nvcc 13.0.88 from PyPI + Debian's g++ build an SM90 cubin."""
    client = _client()
    image = _image(client, "openjev-repro/native:toolchain", "invoke build --backend native --target toolchain")
    spec = load_spec("native")
    script = ("cd /tmp && printf '__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }\\n' > k.cu"
              f" && NVCC_APPEND_FLAGS='{spec.build_args['NVCC_FLAGS']} -arch=sm_{spec.cuda_arch}' nvcc --cubin k.cu -o k.cubin"
              " && nvcc --version | tail -1 && grep -c sm_90 k.cubin && od -An -tx1 -N4 k.cubin")
    out = _run(client, image, ["sh", "-c", script]).splitlines()
    assert out[0].startswith("Build cuda_13.0") and int(out[1]) >= 1 and out[2].split() == ["7f", "45", "4c", "46"]


def _git_package(path):
    """A throw-away setuptools package of our own in a git repository (no upstream code): what the
    source layer does with any pinned checkout."""
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    (path / "layer_probe").mkdir(parents=True)
    (path / "layer_probe" / "__init__.py").write_text("WHERE = 'source layer'\n")
    (path / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
                                        '[project]\nname = "layer-probe"\nversion = "0.1"\n')
    # A message of its own: two checkouts testing on one daemon at the same second would otherwise make the
    # same commit, hence the same temporary tag, and one would remove the other's image.
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", f"probe {uuid.uuid4().hex}"]):
        subprocess.run(["git", *argv], cwd=path, env=env, check=True, capture_output=True)
    (path / "untracked.py").write_text("not committed\n")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True).stdout.strip()


def test_source_layer_installs_a_pinned_checkout_without_network(tmp_path):
    from openjev_repro.images.build import add_source_layer
    from openjev_repro.images.spec import ImageSource

    client = _client()
    env_image = _image(client, load_spec("hf").tag, "invoke build --backend hf --offline")
    commit = _git_package(tmp_path / "checkout")
    probe = ImageSource(name="probe", url="file:///probe", commit=commit)
    spec = load_spec("hf").model_copy(update={"sources": [probe]})
    record = add_source_layer(spec, client.images.get(env_image).id, tmp_path / "checkout", progress=lambda _: None)
    try:
        assert record["tag"] == f"openjev-repro/hf:{commit[:7]}" and record["sources"] == {"probe": commit}
        out = _run(client, record["tag"], ["python", "-c", ("import layer_probe, importlib.metadata as m, os; "
                                           "print(layer_probe.WHERE, m.version('layer-probe'), sorted(os.listdir('/opt/src/probe')))")])
        assert out == "source layer 0.1 ['layer_probe', 'pyproject.toml']"  # the commit's tree only
        image = client.images.get(record["tag"])
        assert image.labels["io.openjev-repro.source.probe.included"] == "yes"
        assert f"OPENJEV_REPRO_UPSTREAM_SOURCE=probe@{commit}" in image.attrs["Config"]["Env"]
        assert image.attrs["RootFS"]["Layers"][0] == client.images.get(env_image).attrs["RootFS"]["Layers"][0]
    finally:
        client.images.remove(record["tag"], force=True)


def test_package_probe_container_is_removed_by_the_reaper_if_the_study_dies_mid_probe():
    """The probe that records an image's packages is registered with the study's reaper from its
    creation: closing the reaper while the probe runs (the study died) leaves no probe container."""
    import threading
    import time

    from openjev_repro.host.reaper import Reaper
    from openjev_repro.images.inspect import image_packages

    client = _client()
    image = client.images.get(_image(client, load_spec("hf").tag, "invoke build --backend hf --offline"))
    before = {c.id for c in client.containers.list(all=True)}
    reaper = Reaper().start()
    assert reaper.proc is not None
    outcome: dict = {}

    def probe() -> None:
        try:
            outcome["result"] = image_packages(client, image.id, reaper)
        except DockerError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=probe)
    thread.start()
    probes: list = []
    deadline = time.monotonic() + 60
    while not probes and thread.is_alive() and time.monotonic() < deadline:
        probes = [c for c in client.containers.list(filters={"ancestor": image.id}) if c.id not in before]
        time.sleep(0.05)
    reaper.close()  # the study died: the reaper removes what is still registered
    thread.join(timeout=120)
    assert probes, f"no running probe container was seen (the probe ended first: {outcome})"
    assert "result" not in outcome or not outcome["result"]["available"]  # a killed probe records nothing
    # the probe containers it saw are gone (not "no new container": another checkout's tests share the daemon)
    seen = {c.id for c in probes}
    left = [c.id for c in client.containers.list(all=True) if c.id in seen]
    assert left == []
