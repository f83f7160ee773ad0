"""The reference server's HTTP edges (issue 41 item 9) against real clients: Debian's `ab -k` and `hey`,
HTTP/1.0 keep-alive on a raw socket, a burst of connections larger than socketserver's old listen
backlog of 5, and the compute deadline that grows with the request.

`ab` (apache2-utils) and `hey` are skipped, with the reason, only where the binary is absent; with
OPENJEV_REQUIRE_PEERS=1 (set by .ci/run, which installs them) their absence fails instead.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from openjev_repro.backend.server import COMPUTE_TIMEOUT_S, DEADLINE_CANDIDATES, compute_deadline_s

pytestmark = pytest.mark.slow

NOUL = {"model": "open-jev", "state": "The meeting is on Monday.",
        "questions": {"q": {"type": "noul", "instructions": "Is the meeting on Monday?"}}}
SLOW_MARK = "PLEASE-BE-SLOW"
FAULTY = str(Path(__file__).parent / "servers" / "faulty_backend.py")
REQUIRED = os.environ.get("OPENJEV_REQUIRE_PEERS") == "1"


def _binary(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        why = f"`{name}` is not installed (Debian: apt-get install -y {package})"
        if REQUIRED:
            pytest.fail(f"OPENJEV_REQUIRE_PEERS=1 but {why}")
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def raw(start_server, fixture_checkpoint: Path):
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw", "--max-length", "4096"])
    server.wait_ready()
    return server


def _ab_figures(output: str) -> dict[str, int]:
    figures = {}
    for label in ("Complete requests", "Failed requests", "Non-2xx responses", "Keep-Alive requests"):
        match = re.search(rf"^{label}:\s+(\d+)", output, re.MULTILINE)
        figures[label] = int(match.group(1)) if match else 0
    return figures


@pytest.mark.parametrize("method", ["GET /health", "POST /v1/systemone"])
def test_ab_keep_alive_reuses_every_connection(raw, tmp_path: Path, method: str) -> None:
    """`ab -k` speaks HTTP/1.0 with `Connection: keep-alive` (`-l`: answers differ in length, as
    inference_seconds does): before the fix every request waited for a
    close that never came and ab gave up (apr_pollset_poll timeout)."""
    ab = _binary("ab", "apache2-utils")
    verb, path = method.split()
    body = tmp_path / "body.json"
    body.write_text(json.dumps(NOUL))
    post = ["-p", str(body), "-T", "application/json"] if verb == "POST" else []
    started = time.monotonic()
    result = subprocess.run([ab, "-k", "-l", "-n", "12", "-c", "3", "-s", "10", *post, f"{raw.url}{path}"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-600:] + result.stderr[-600:]
    figures = _ab_figures(result.stdout)
    assert figures == {"Complete requests": 12, "Failed requests": 0, "Non-2xx responses": 0,
                       "Keep-Alive requests": 12}, result.stdout
    assert time.monotonic() - started < 60


def test_hey_measures_the_backend(raw, tmp_path: Path) -> None:
    hey = _binary("hey", "hey")
    body = tmp_path / "body.json"
    body.write_text(json.dumps(NOUL))
    result = subprocess.run([hey, "-n", "12", "-c", "3", "-t", "30", "-m", "POST", "-T", "application/json",
                             "-D", str(body), f"{raw.url}/v1/systemone"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert re.search(r"\[200\]\s+12 responses", result.stdout), result.stdout
    assert "Error distribution" not in result.stdout, result.stdout


def _exchange(sock: socket.socket, request: bytes) -> bytes:
    """One response read whole by its Content-Length."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head


def test_http10_keep_alive_is_answered_and_kept(raw) -> None:
    ask = b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    with socket.create_connection(("127.0.0.1", raw.port), timeout=10) as sock:
        first = _exchange(sock, ask)
        second = _exchange(sock, ask)  # the same connection serves a second request
    for head in (first, second):
        assert head.startswith(b"HTTP/1.1 200") and re.search(rb"(?im)^connection: keep-alive\r?$", head), head
    with socket.create_connection(("127.0.0.1", raw.port), timeout=10) as sock:
        plain = _exchange(sock, b"GET /health HTTP/1.0\r\n\r\n")  # no keep-alive asked: closed, and said so
        assert re.search(rb"(?im)^connection: close\r?$", plain) and sock.recv(1) == b""


def _connected_within(sockets: list[socket.socket], seconds: float) -> int:
    """How many non-blocking connects completed (the kernel finished the handshake) within `seconds`."""
    pending = {s.fileno(): s for s in sockets}
    done = 0
    deadline = time.monotonic() + seconds
    while pending and (left := deadline - time.monotonic()) > 0:
        _, writable, _ = select.select([], list(pending), [], left)
        for fd in writable:
            sock = pending.pop(fd)
            done += sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    return done


def test_a_burst_of_connections_is_not_held_by_the_listen_backlog(raw) -> None:
    """With the server's accept loop stopped (SIGSTOP), the kernel still completes as many handshakes as
    the listen backlog holds: socketserver's default of 5 left the rest waiting ~1 s for a SYN retry."""
    burst = 48
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(burst)]
    os.kill(raw.proc.pid, signal.SIGSTOP)
    try:
        for sock in sockets:
            sock.setblocking(False)
            assert sock.connect_ex(("127.0.0.1", raw.port)) in (0, 115)  # 115: EINPROGRESS
        connected = _connected_within(sockets, 0.5)
    finally:
        os.kill(raw.proc.pid, signal.SIGCONT)
        for sock in sockets:
            sock.close()
    assert connected == burst
    assert httpx.get(f"{raw.url}/health", timeout=30).status_code == 200


def test_the_compute_deadline_grows_with_the_candidates() -> None:
    assert compute_deadline_s(COMPUTE_TIMEOUT_S, 1) == COMPUTE_TIMEOUT_S
    assert compute_deadline_s(COMPUTE_TIMEOUT_S, DEADLINE_CANDIDATES) == COMPUTE_TIMEOUT_S
    assert compute_deadline_s(COMPUTE_TIMEOUT_S, DEADLINE_CANDIDATES + 1) == 2 * COMPUTE_TIMEOUT_S
    assert compute_deadline_s(COMPUTE_TIMEOUT_S, 4096) == 4 * COMPUTE_TIMEOUT_S  # the contract's most questions
    assert compute_deadline_s(COMPUTE_TIMEOUT_S, 65536) == 64 * COMPUTE_TIMEOUT_S  # its most candidates
    assert compute_deadline_s(0.0, 65536) == 0.0


def test_a_large_request_gets_a_longer_deadline_than_a_small_one(start_server, fixture_checkpoint: Path) -> None:
    """--compute-timeout 1 and an inference that sleeps 1.5 s first: one candidate is past its 1 s at the
    first check; 1,025 candidates have 2 s (the message says so) and are cut later, with some scored."""
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw", "--max-length", "512",
                           "--compute-timeout", "1"],
                          program=[FAULTY, "--slow-on", SLOW_MARK, "--slow-seconds", "1.5"])
    server.wait_ready()
    small = {**NOUL, "state": SLOW_MARK}
    large = {"model": "open-jev", "state": SLOW_MARK,
             "questions": {f"q{i}": {"type": "noul", "instructions": f"Is {i} even?"}
                           for i in range(DEADLINE_CANDIDATES + 1)}}
    answers = [httpx.post(f"{server.url}/v1/systemone", json=body, timeout=300) for body in (small, large)]
    assert [a.status_code for a in answers] == [503, 503]
    small_message, large_message = (a.json()["error"]["message"] for a in answers)
    assert "compute deadline of 1 s" in small_message and "after 0 of 1 candidate" in small_message
    assert "compute deadline of 2 s" in large_message and f"of {DEADLINE_CANDIDATES + 1} candidate" in large_message
    assert "after 0 of" not in large_message  # it went on scoring past the small request's deadline
