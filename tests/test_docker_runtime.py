"""DockerRuntime against a real dockerd: one container per backend, loopback port, read-only inputs,
SIGTERM then SIGKILL, logs saved, container removed. Skipped (with the reason) where dockerd is absent
or no test image was built; scripts/ci-docker.sh provides both."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import textwrap
import urllib.request
from pathlib import Path

import docker
import pytest

from openjev_repro.backend.package import read_package
from openjev_repro.errors import BackendCrashed, DockerError
from openjev_repro.runtime import get_runtime
from openjev_repro.runtime.base import LaunchSpec

pytestmark = pytest.mark.docker

IMAGE = "openjev-repro/reference-cpu:offline"

SERVER = textwrap.dedent('''
    import json, os, signal, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    mode, host, port = sys.argv[1], sys.argv[3], int(sys.argv[5])
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        open(os.path.join(here, "written-by-container"), "w").close()
        read_only = False
    except OSError:
        read_only = True
    print(f"serving mode={mode} host={host} port={port} read_only={read_only}", flush=True)
    if mode == "crash":
        print("fatal: checkpoint unreadable", flush=True); sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"status": "ready", "read_only": read_only, "bound": host}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a): pass
    HTTPServer((host, port), H).serve_forever()
''')


# CI starts dockerd and builds the image first, and sets this so a missing daemon fails, not skips.
REQUIRED = os.environ.get("OPENJEV_REQUIRE_DOCKER") == "1"


def _unavailable(reason: str) -> None:
    (pytest.fail if REQUIRED else pytest.skip)(reason)


def _client():
    try:
        from openjev_repro.images import connect

        return connect(timeout_s=10)
    except DockerError as exc:
        _unavailable(f"dockerd is not reachable: {exc}")


@pytest.fixture(scope="module")
def image() -> str:
    client = _client()
    for ref in (IMAGE,):
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.get(ref)
            return ref
    _unavailable(f"test image {IMAGE} is absent; build it with `invoke build --backend reference --offline`")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec(tmp_path: Path, image: str, mode: str, **kw) -> LaunchSpec:
    inputs = tmp_path / "inputs"
    inputs.mkdir(exist_ok=True)
    (inputs / "server.py").write_text(SERVER)
    port = _free_port()
    return LaunchSpec(name=f"test-{mode}", argv=["/usr/bin/python3", str(inputs / "server.py"), mode, "--host", "127.0.0.1",
                                                 "--port", str(port)],
                      env={}, host="127.0.0.1", port=port, log_path=tmp_path / f"{mode}.log", image=image,
                      read_only_mounts=(inputs,), **kw)


def test_container_serves_on_loopback_with_read_only_inputs_and_stops_on_sigterm(tmp_path, image):
    backend = get_runtime("docker").launch(_spec(tmp_path, image, "ok", cpus="0"))
    try:
        health = backend.wait_ready(60)
        assert health == {"status": "ready", "read_only": True, "bound": "0.0.0.0"}
        assert not (tmp_path / "inputs" / "written-by-container").exists()
    finally:
        record = backend.stop(grace_s=10)
    assert record.runtime == "docker" and record.stopped_by_us and not record.killed and record.intentional
    assert record.exit_status == 143 and record.signal == "SIGTERM" and record.exited
    assert record.binding["cpuset_cpus"] == "0"
    ports = record.binding["ports"]
    assert [b["HostIp"] for bindings in ports.values() for b in bindings] == ["127.0.0.1"]
    assert "serving mode=ok host=0.0.0.0" in (tmp_path / "ok.log").read_text()
    assert backend.stop(grace_s=1) is record  # idempotent
    with pytest.raises(docker.errors.NotFound):  # removed, not merely stopped
        _client().containers.get(record.ident)


def test_container_that_exits_before_ready_is_reported_with_its_log(tmp_path, image):
    backend = get_runtime("docker").launch(_spec(tmp_path, image, "crash"))
    try:
        with pytest.raises(BackendCrashed, match=r"exited before it was ready.*status 3[\s\S]*checkpoint unreadable"):
            backend.wait_ready(60)
    finally:
        record = backend.stop(grace_s=5)
    assert record.exit_status == 3 and not record.stopped_by_us and not record.intentional and record.exited


def test_container_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path, image):
    backend = get_runtime("docker").launch(_spec(tmp_path, image, "stubborn"))
    backend.wait_ready(60)
    record = backend.stop(grace_s=2)
    assert record.killed and record.stopped_by_us and record.exit_status == 137 and record.signal == "SIGKILL"
    assert record.exited
    assert "ignoring SIGTERM" in (tmp_path / "stubborn.log").read_text()


def test_missing_image_says_how_to_build_it(tmp_path, image):
    spec = _spec(tmp_path, "openjev-repro/does-not-exist:1", "ok")
    with pytest.raises(DockerError, match="is not present on this host. Build it with `invoke build"):
        get_runtime("docker").launch(spec)


@pytest.mark.slow
def test_reference_backend_serves_the_fixture_checkpoint_in_the_image(tmp_path, image, fixture_checkpoint):
    port = _free_port()
    spec = LaunchSpec(name="reference", argv=["/work/main/.venv/bin/python", "-m", "openjev_repro.backend",
                                              "--checkpoint", str(fixture_checkpoint), "--mode", "raw",
                                              "--max-length", "512", "--host", "127.0.0.1", "--port", str(port)],
                      env={}, host="127.0.0.1", port=port, log_path=tmp_path / "ref.log", image=image,
                      read_only_mounts=(fixture_checkpoint,))
    backend = get_runtime("docker").launch(spec)
    try:
        assert backend.wait_ready(180)["status"] == "ready"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
            assert resp.status == 200
            models = json.loads(resp.read())
        base_model = read_package(fixture_checkpoint).base_model_id
        names = ["open-jev", "jev-latest", base_model]
        assert models["object"] == "list"
        assert models["data"] == [{"id": name, "object": "model", "owned_by": "openjev-repro"} for name in names]
        assert [m["name"] for m in models["models"]] == names  # the official SDK's shape beside it
    finally:
        record = backend.stop(grace_s=10)
    assert record.intentional and record.exited


def test_reaper_removes_a_runtime_container_when_the_study_dies_without_stopping_it(tmp_path, image):
    """The docker runtime registers each container with the study's reaper (host/reaper.py): if the
    study ends without stopping it (the reaper's pipe closes, as on kill -9), the reaper removes it."""
    from openjev_repro.host.reaper import Reaper
    from openjev_repro.runtime.docker import DockerRuntime

    reaper = Reaper().start()
    assert reaper.proc is not None
    try:
        backend = DockerRuntime(reaper=reaper).launch(_spec(tmp_path, image, "ok"))
        backend.wait_ready(60)
        ident = backend.container.id
        assert _client().containers.get(ident).status == "running"
    finally:
        reaper.close()  # EOF without forget-container: what the reaper sees when the study dies
    with pytest.raises(docker.errors.NotFound):
        _client().containers.get(ident)
