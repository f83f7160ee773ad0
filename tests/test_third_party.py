"""Foreign /v1/systemone servers as study backends, as they ship (issue 24 items 3-5).

Real servers on loopback throughout: small in-process HTTP servers for readiness and connection
behaviour, the scripted backend reached by URL, and the real PyPI peers (`jevcompat mock`,
`jev-compatible-server`) from their own virtual environments under .cache/peers/ (made by
scripts/peers.sh jevcompat jev-compatible-server). The peer tests skip, saying why, when those venvs are absent, unless
OPENJEV_REQUIRE_PEERS=1 (set by .ci/run), which makes their absence a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from studykit import SCRIPTED, write_study

from openjev_repro.audit import verify_path
from openjev_repro.audit.compare import compare_runs, to_markdown
from openjev_repro.errors import BackendNotReady, RecipeError, ReproError
from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import Row, read_rows
from openjev_repro.manifest.keys import generate_keypair
from openjev_repro.orchestrator.runner import StudyOptions, free_port, run_study
from openjev_repro.results.row_table import read_table
from openjev_repro.results.tokens import token_differences, token_phrase
from openjev_repro.runtime.readiness import poll_ready
from openjev_repro.study.timed_client import TimedClient

REPO = Path(__file__).resolve().parents[1]
PEERS = REPO / ".cache" / "peers"
JEVCOMPAT = PEERS / "jevcompat" / "bin" / "jevcompat"
JCS_PYTHON = PEERS / "jev-compatible-server" / "bin" / "python"
REQUIRED = os.environ.get("OPENJEV_REQUIRE_PEERS") == "1"


def need(*paths: Path) -> None:
    missing = [str(p.relative_to(REPO)) for p in paths if not p.exists()]
    if not missing:
        return
    why = f"peer virtual environments absent ({', '.join(missing)}); `bash scripts/peers.sh jevcompat jev-compatible-server` makes them"
    if REQUIRED:
        pytest.fail(f"OPENJEV_REQUIRE_PEERS=1 but {why}")
    pytest.skip(why)


# --- small real servers ------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """GET /health answers {"status": "ok"}; POST /v1/systemone refuses any model but "good"."""

    protocol_version = "HTTP/1.0"  # closes after every response, as `jevcompat mock` does

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/systemone":
            self._send(404, {"detail": "Not Found"})
        elif body.get("model") != "good":
            self._send(400, {"detail": {"message": f"Unknown model: {body.get('model')}"}})
        else:
            self._send(200, {"model": "good", "answers": {"q": {"type": "noul", "noul": 0.75}},
                             "usage": {"input_tokens": 9, "output_tokens": 0}})


@pytest.fixture
def closing_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class _Up:
    def alive(self) -> bool:
        return True

    def describe_exit(self) -> str:
        return ""


def _poll(port: int, kind: str, *, model: str = "good", endpoint: str = "/v1/systemone", timeout: float = 1.0):
    probe = json.dumps({"model": model, "state": "s", "questions": {"q": {"type": "noul", "instructions": "i"}}})
    return poll_ready(_Up(), name="b", kind=kind, base_url=f"http://127.0.0.1:{port}", health="/health",
                      endpoint=endpoint, model=model, probe=probe.encode(), timeout_s=timeout, log_hint="", poll_s=0.05)


def test_readiness_kinds_against_a_real_server(closing_server):
    # Our contract wants status "ready": {"status": "ok"} never is, and the error says which kind fits.
    with pytest.raises(BackendNotReady, match="readiness: any-2xx"):
        _poll(closing_server, "status-ready", timeout=0.3)
    health, ready = _poll(closing_server, "any-2xx")
    assert health == {"status": "ok"} and ready.kind == "any-2xx" and ready.answer == "HTTP 200"
    health, ready = _poll(closing_server, "first-inference")
    assert health == {} and ready.url.endswith("/v1/systemone")


def test_refused_first_inference_names_the_recipe_field(closing_server):
    with pytest.raises(BackendNotReady, match=r"model name 'open-jev': set the backend's `model:`") as err:
        _poll(closing_server, "first-inference", model="open-jev", timeout=10)
    assert "Unknown model" in str(err.value)
    with pytest.raises(BackendNotReady, match=r"set the backend's `endpoint:`"):
        _poll(closing_server, "first-inference", endpoint="/v2/other", timeout=10)


def test_client_counts_connections_a_server_closes(closing_server):
    body = json.dumps({"model": "good", "state": "s", "questions": {}}).encode()
    with TimedClient("127.0.0.1", closing_server, timeout_s=5) as client:
        answers = [client.request("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
                   for _ in range(4)]
        record = client.connections()
    assert [a.reconnected for a in answers] == [False, True, True, True]
    assert {a.http_version for a in answers} == {"1.0"}
    assert record == {"connections_opened": 4, "closed_by_server": 4, "reconnected_requests": 3,
                      "http_versions": ["1.0"]}


def test_rows_of_older_runs_read_without_the_reconnected_field(tmp_path):
    row = Row(id="a", backend="b", workload="w", phase="measured", pass_index=1, seq=0, start_ns=1, end_ns=2,
              status=200, body_sha256="0" * 64, probability=0.5, decision="yes", label="yes", input_tokens=3,
              error=None, reconnected=True)
    old = json.loads(row.to_json())
    del old["reconnected"]
    path = tmp_path / "rows.jsonl"
    path.write_text(row.to_json() + "\n" + json.dumps(old) + "\n")
    assert [r.reconnected for r in read_rows(path)] == [True, None]
    assert read_table(path).reconnected == [True, None]
    path.write_text(json.dumps({**old, "reconnected": "yes"}) + "\n")  # a wrong type is still refused
    with pytest.raises(ReproError, match="rows.jsonl:1"):
        read_table(path)


def test_token_differences_say_which_cases_differ():
    import numpy as np

    known = np.array([True, True, True, False])
    diff = token_differences(["a", "b", "c", "d"], [0, 1, 2, 3], np.array([10, 20, 30, 0]), known,
                             np.array([36, 20, 56, 40]), np.ones(4, dtype=bool))
    assert diff.differing == 2 and diff.deltas == {"26": 2} and diff.missing == 1
    assert token_phrase(diff, "B", "A") == "input tokens DIFFER in 2 of 3 cases (B − A: +26 in 2): a, c; 1 without a count"
    same = token_differences(["a"], [0], np.array([5]), np.array([True]), np.array([5]), np.array([True]))
    assert token_phrase(same, "B", "A") == "input tokens identical in all 1 cases"


_RECIPE = """format_version: 1
study: {id: s, date: 2026-12-01, purpose: p}
inputs: {root: ., files: [{path: r.jsonl, sha256: '%s'}]}
workloads: [{name: w, requests: r.jsonl}]
backends:
  - %s
"""


@pytest.mark.parametrize(("backend", "message"), [
    ("{name: b}", "needs a `command` to launch, or the `url`"),
    ("{name: b, url: 'https://127.0.0.1:1'}", "only http:// is supported"),
    ("{name: b, url: 'http://127.0.0.1:1/v1/systemone'}", "the path goes into `endpoint`"),
    ("{name: b, url: 'http://127.0.0.1:1', command: [x]}", "both `command` and `url`"),
    ("{name: b, url: 'http://127.0.0.1:1', env: {A: b}, port: 3}", "so port, env"),
    ("{name: b, command: [x], readiness: sometimes}", "'status-ready', 'any-2xx' or 'first-inference'"),
    ("{name: b, command: [x], health: 'health'}", "health 'health' is a path"),
])
def test_recipe_refuses_bad_server_fields(backend, message):
    with pytest.raises(RecipeError, match=r"recipe.yaml:6: backends\[0\]") as err:
        parse_recipe(_RECIPE % ("0" * 64, backend), "recipe.yaml")
    assert message in str(err.value)


# --- a study with a server it did not start ------------------------------------------------


@pytest.fixture
def running_scripted(tmp_path) -> Iterator[int]:
    port = free_port()
    log = open(tmp_path / "scripted.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, str(SCRIPTED), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with TimedClient("127.0.0.1", port, timeout_s=1) as client:
                    if client.request("GET", "/health").status == 200:
                        break
            except ReproError:
                time.sleep(0.1)
        yield port
        assert proc.poll() is None, "the study stopped a server it did not start"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _signed_study(tmp_path: Path, recipe: Path, inputs_root: Path | None = None):
    keys = tmp_path / "keys"
    generate_keypair(keys)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", key_path=keys / "openjev-repro.key",
                                 inputs_root=inputs_root))
    checks = verify_path(run.path, pubkey=keys / "openjev-repro.pub")
    assert not [c for c in checks if c.passed is False], [c for c in checks if c.passed is False]
    return run


def test_a_running_server_given_by_url_is_measured_and_left_running(tmp_path, running_scripted):
    recipe = write_study(tmp_path, [{"name": "theirs", "url": f"http://127.0.0.1:{running_scripted}"}])
    run = _signed_study(tmp_path, recipe)
    server = run.read("servers.json")["backends"]["theirs"]
    assert server["launched"] is False and server["owned"] is False
    assert server["url"] == f"http://127.0.0.1:{running_scripted}"
    assert server["connections"]["connections_opened"] == 1 and server["connections"]["closed_by_server"] == 0
    (process,) = run.read("processes.json")["processes"]
    assert process["launched"] is False and process["runtime"] == "external" and process["stopped_by_us"] is False
    plan = run.read("plan.json")["backends"][0]
    assert plan["launched"] is False and plan["url"] == server["url"]
    report = run.file("report.md").read_text()
    assert "a server running already at http://127.0.0.1:" in report and "not launched, stopped or owned" in report
    assert "over one persistent connection" in report


# --- the real peers ---------------------------------------------------------------------------


def _listening(port: int, timeout_s: float = 30.0) -> None:
    """Wait until something accepts connections on the port (a server we started for a `url` backend)."""
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {timeout_s} s")


def test_jevcompat_mock_without_a_wrapper_completes_and_verifies(tmp_path):
    need(JEVCOMPAT)
    port = free_port()
    mock = subprocess.Popen([str(JEVCOMPAT), "mock", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _listening(port)
        launched = {"name": "mock", "command": [str(JEVCOMPAT), "mock", "--host", "{host}", "--port", "{port}"],
                    "readiness": "first-inference", "model": "jev-latest"}
        reached = {"name": "mock-by-url", "url": f"http://127.0.0.1:{port}", "readiness": "first-inference",
                   "model": "jev-latest"}
        run = _signed_study(tmp_path, write_study(tmp_path, [launched, reached]))
    finally:
        mock.terminate()
        mock.wait(10)
    servers = run.read("servers.json")["backends"]
    for name in ("mock", "mock-by-url"):
        conn = servers[name]["connections"]
        # HTTP/1.0, closed after every response: one connection per request, each recorded
        assert conn["connections_opened"] == conn["requests"] == conn["closed_by_server"] > 1
        assert conn["http_versions"] == ["1.0"] and conn["reconnected_requests"] == conn["requests"] - 1
        rows = [r for r in read_rows(run.rows_path) if r.backend == name]
        assert [r.reconnected for r in rows] == [False] + [True] * (len(rows) - 1)
    assert servers["mock"]["launched"] is True and servers["mock-by-url"]["launched"] is False
    report = run.file("report.md").read_text()
    # 1 first inference + 2 warm-up + 3 passes x 6 = 21 requests, each on its own connection
    assert servers["mock"]["connections"]["requests"] == 21
    assert "21 connections for 21 requests: the server closed 21 (HTTP/1.0), so 20 requests were sent" in report
    assert "did not share one persistent connection" in report
    assert "decisions agree; max probability difference 0.000000" in report  # the mock is deterministic
    assert "; input tokens identical in all 6 cases." in report  # the Agreement line compares token counts


def test_an_unknown_model_name_fails_the_first_inference_with_the_fix(tmp_path):
    need(JEVCOMPAT)
    backend = {"name": "mock", "command": [str(JEVCOMPAT), "mock", "--host", "{host}", "--port", "{port}"],
               "readiness": "first-inference"}  # model left at open-jev, which the mock refuses
    with pytest.raises(ReproError, match=r"Unknown model: open-jev.*set the backend's `model:`"):
        run_study(StudyOptions(recipe_path=write_study(tmp_path, [backend]), out_dir=tmp_path / "runs"))
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "state.json").read_text())["status"] == "incomplete"


@pytest.fixture(scope="module")
def third_party_run(tmp_path_factory, fixture_root):
    need(JEVCOMPAT, JCS_PYTHON)
    tmp = tmp_path_factory.mktemp("third-party")
    return _signed_study(tmp, REPO / "recipes" / "demo-third-party.yaml", inputs_root=fixture_root)


def test_third_party_demo_verifies_and_agrees_with_our_raw_backend(third_party_run):
    run = third_party_run
    summary = run.read("summary.json")
    assert all(g["passed"] for g in summary["gates"]), summary["gates"]
    pair = next(c for c in summary["workloads"]["mixed"]["comparisons"]
                if (c["baseline"], c["candidate"]) == ("reference-raw", "jev-compatible-server"))
    assert pair["max_probability_delta"] == 0.0 and pair["agreement"] == pair["n"] == 24
    tolerances = {"format_version": 1, "backends": {"reference-raw": "jev-compatible-server"}}
    result = compare_runs(run.path, run.path, tolerances=tolerances)
    (tokens,) = [p["input_tokens"] for p in result.to_json()["pairs"]
                 if (p["baseline_backend"], p["candidate_backend"]) == ("reference-raw", "jev-compatible-server")]
    assert tokens["compared"] == 24 and tokens["differing"] == 0
    assert "input tokens identical in all 24 cases" in to_markdown(result)
    report = run.file("report.md").read_text()
    assert "input tokens identical in all 24 cases." in report
    servers = run.read("servers.json")["backends"]
    assert servers["jev-compatible-server"]["readiness"]["kind"] == "any-2xx"
    mock = servers["jevcompat-mock"]["connections"]
    assert mock["connections_opened"] == mock["requests"] == 76 and mock["http_versions"] == ["1.0"]
    assert "jevcompat-mock: launched and stopped by the study" in report and "a foreign server" in report


def test_third_party_recipe_as_committed_is_valid():
    recipe = parse_recipe((REPO / "recipes" / "demo-third-party.yaml").read_text(), "demo-third-party.yaml")
    kinds = {b.name: b.readiness for b in recipe.backends}
    assert kinds == {"reference-raw": "status-ready", "reference-fast": "status-ready",
                     "jev-compatible-server": "any-2xx", "jevcompat-mock": "first-inference"}
    assert yaml.safe_load((REPO / "recipes" / "demo-third-party.yaml").read_text())["inputs"]["scan"] == [
        "checkpoint", "requests", "peers"]


def _rows(backend: str, tokens: list[int]) -> list[Row]:
    return [Row(id=f"c{i}", backend=backend, workload="w", phase="measured", pass_index=1, seq=i, start_ns=0,
                end_ns=1_000_000, status=200, body_sha256="0" * 64, probability=0.5, decision="yes", label=None,
                input_tokens=n, error=None) for i, n in enumerate(tokens)]


def test_compare_reports_input_token_differences_per_case():
    from openjev_repro.audit.compare import compare_rows

    result = compare_rows(_rows("b", [10, 20, 30]), _rows("b", [36, 20, 56]))
    (pair,) = result.to_json()["pairs"]
    tokens = pair["input_tokens"]
    assert [c["delta"] for c in tokens["by_case"]] == [26, 0, 26] and tokens["differing"] == 2
    assert pair["answers"]["max_abs_probability_delta"] == 0.0  # same probabilities, different prompts
    assert "- input tokens DIFFER in 2 of 3 cases (candidate − baseline: +26 in 2): c0, c2" in to_markdown(result)


@pytest.mark.parametrize("servers", [
    {"backends": []}, {"backends": {"a": []}}, {"backends": {"a": {"connections": [], "readiness": "x"}}},
    {"backends": {"a": {"connections": {"http_versions": "1.0", "reconnected_requests": "many"}}}},
    [], {"backends": {"a": {"launched": False, "url": "http://x:1\\nnext line"}}},
])
def test_server_lines_take_hostile_servers_files(servers):
    """A servers.json of a wrong shape is refused by its record (one line); one that decodes prints one line per
    backend whatever its text holds."""
    from openjev_repro.errors import EvidenceError
    from openjev_repro.evidence.records import BackendsRecord, ServersRecord
    from openjev_repro.results.servers import server_lines

    try:
        record = ServersRecord.from_json(servers)
    except EvidenceError as exc:
        assert "\n" not in str(exc)
        return
    lines = server_lines(record, BackendsRecord(), ["a"])
    assert all(isinstance(line, str) and "\n" not in line for line in lines)


def test_a_url_with_nothing_behind_it_fails_before_any_run_directory(tmp_path):
    port = free_port()  # bound and released: nothing listens there now
    recipe = write_study(tmp_path, [{"name": "theirs", "url": f"http://127.0.0.1:{port}"}])
    with pytest.raises(ReproError, match=rf"nothing accepts connections at http://127.0.0.1:{port}.*start it first"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()  # a study that never started leaves no run directory
