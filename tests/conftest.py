"""Shared fixtures: the fixture checkpoint (built once per session) and reference servers as subprocesses."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tiers

REPO = Path(__file__).resolve().parents[1]

# `make test` runs the suite on pytest-xdist workers with `--dist loadfile`: each module runs on one
# worker, so its module-scoped fixtures (a backend subprocess, a demo study) start once. The modules
# that drive the one shared dockerd form one unit, so they never overlap. (A scheduler rather than
# xdist_group marks: --dist loadgroup ignores the marks on pytest 9.2, pytest-xdist issue #1386.)
SHARED_UNITS = {"test_docker_runtime.py": "dockerd", "test_gpu_images.py": "dockerd"}
# Handed out first, so that the long ones do not start last: Slurm's time limit alone takes 60-90 s.
LONG_FIRST = ("test_cluster.py", "test_backend_seeding.py", "test_backend_server.py", "test_docker_runtime.py",
              "test_gpu_images.py", "test_demo.py", "test_conformance.py", "test_third_party.py",
              "test_prepare_adapters.py", "test_cli_bad_input.py")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_UNITS.get(Path(module).name, module)

    config.option.loadscopereorder = False  # units in collection order: LONG_FIRST first
    return ModuleScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if tiers.in_the_fast_tier(config):
        config.pluginmanager.register(tiers, "fast-tier-cpu-stamps")
        config.pluginmanager.register(tiers.CpuBudget(), "fast-tier-cpu-budget")


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects: the rule's marks count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # the tiers (tests/tiers.py): what starts a process is slow, by rule
        if "slow" not in item.keywords and tiers.classify(item):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # only the distributed run; a plain run keeps the file order
        rank = {name: i for i, name in enumerate(LONG_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def _no_process_in_the_fast_tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the fast tier a test that starts a process fails, naming it: tests/tiers.py's rule missed it."""
    tiers.refuse_processes_in_the_fast_tier(request, monkeypatch)


def _write_fixture(root: Path) -> None:
    from openjev_repro.backend.fixture import build_fixture
    from openjev_repro.backend.peer_inputs import write_peer_inputs
    from openjev_repro.backend.synthetic import write_request_files

    build_fixture(root / "checkpoint")
    write_request_files(root / "checkpoint" / "base", root / "requests")
    write_peer_inputs(root)


@pytest.fixture(scope="session")
def fixture_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DIR with checkpoint/ (the fixture package) and requests/ (synthetic.REQUEST_FILES).

    Built once per run: under xdist the first worker builds it in the run's shared temporary
    directory while the others wait on a lock; tests only read it (those that damage it copy it first)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        root = tmp_path_factory.mktemp("fixture")
        _write_fixture(root)
        return root
    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, the parent of every worker's popen-gwK/
    root = shared / "fixture"
    with open(shared / "fixture.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "fixture.done").exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker that died half-way
            _write_fixture(root)
            (shared / "fixture.done").touch()
    return root


@pytest.fixture(scope="session")
def fixture_checkpoint(fixture_root: Path) -> Path:
    return fixture_root / "checkpoint"


class ServerProcess:
    """A reference backend started as `python -m openjev_repro.backend` on an ephemeral loopback port;
    `program` replaces `-m openjev_repro.backend`, e.g. with tests/servers/faulty_backend.py and its flags."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 program: list[str] | None = None):
        self.log = log
        full_env = {**os.environ, "OPENJEV_CODE_COMMIT": "test", **(env or {})}
        program = program or ["-m", "openjev_repro.backend"]
        with open(log, "wb") as err:  # the child keeps its own descriptor of the log
            self.proc = subprocess.Popen([sys.executable, *program, "--host", "127.0.0.1",
                                          "--port", "0", "--threads", "1", *args],
                                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, env=full_env)
        self.port: int | None = None

    def events(self) -> list[dict]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith('{"event"'):
                out.append(json.loads(line))
        return out

    def wait_port(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if event["event"] == "listening":
                    self.port = event["port"]
                    return self.port
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise TimeoutError(f"server never bound a port:\n{self.log.read_text()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 120) -> dict:
        self.wait_port()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                response = httpx.get(f"{self.url}/health", timeout=5)
                if response.status_code == 200:
                    return response.json()
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server never became ready:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Factory: start_server(args, env=None, program=None) -> ServerProcess (stopped at session end)."""
    started: list[ServerProcess] = []
    logs = tmp_path_factory.mktemp("server-logs")

    def start(args: list[str], env: dict[str, str] | None = None, program: list[str] | None = None) -> ServerProcess:
        server = ServerProcess(args, logs / f"server-{len(started)}.log", env, program)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
