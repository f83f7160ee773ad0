"""The benchmarks run end to end at tiny sizes (no timing assertions: they prove the machinery)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest
from invoking import INVOKE, invoke

from openjev_repro.backend.prompts import MODEL_ALIASES, parse_request
from openjev_repro.bench import (
    BenchUsageError,
    calibrate_client_overhead,
    parse_sizes,
    run_client_bench,
    run_hash_bench,
)
from openjev_repro.bench.client_bench import ClientBenchResult
from openjev_repro.bench.hash_bench import ensure_files
from openjev_repro.bench.loopback_server import SYSTEMONE_REQUEST, SYSTEMONE_RESPONSE, LoopbackServer
from openjev_repro.bench.stats import summarize_ns
from openjev_repro.study.passes import parse_noul_response
from openjev_repro.study.timed_client import TimedClient, build_request

ROOT = Path(__file__).resolve().parents[1]


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, f"the server closed the connection after {len(data)} of {n} bytes"
        data += chunk
    return data


def _nothing_more(sock: socket.socket, wait_s: float = 0.3) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""  # b"": closed; a byte: an answer nobody asked for
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)


def test_loopback_server_answers_pipelined_and_split_requests() -> None:
    wire = build_request("POST", "/v1/systemone", "127.0.0.1", SYSTEMONE_REQUEST, {"Content-Type": "application/json"})
    head = wire.index(b"\r\n\r\n") + 4
    with LoopbackServer() as server, socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answer = server.response
        # Pipelined: three requests and the start of a fourth in one send; three answers, in order.
        sock.sendall(wire * 3 + wire[:10])
        assert _recv(sock, 3 * len(answer)) == answer * 3
        assert _nothing_more(sock)  # the fourth is incomplete: no answer yet
        # Split: the rest of the fourth in pieces (inside the head, at its end, inside the body).
        for piece in (wire[10:40], wire[40:head], wire[head : head + 7], wire[head + 7 : -1]):
            sock.sendall(piece)
            assert _nothing_more(sock, 0.1)
        sock.sendall(wire[-1:])
        assert _recv(sock, len(answer)) == answer
        assert _nothing_more(sock)
        with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:  # one request at a time, kept alive
            for _ in range(3):
                r = client.request("POST", "/v1/systemone", SYSTEMONE_REQUEST)
                assert r.body == SYSTEMONE_RESPONSE and r.headers["content-type"] == "application/json"
            assert client.connections_opened == 1


def test_bench_request_and_response_follow_the_http_contract() -> None:
    """The benchmark times a body of the real contract's shape (shared/facts/upstream.md), which a study accepts."""
    answer = parse_noul_response(SYSTEMONE_RESPONSE)  # what a study's pass runner does with a response
    assert (answer.decision, answer.input_tokens) == ("yes", 1234) and 0 < answer.probability < 1
    assert set(json.loads(SYSTEMONE_RESPONSE)["metadata"]) == {
        "method", "temperature", "candidate_sequences", "inference_seconds", "prefix_cache", "checkpoint_sha256",
        "base_revision", "max_length", "backbone_parameter_dtypes", "code_commit"}
    model, _, questions = parse_request(json.loads(SYSTEMONE_REQUEST), MODEL_ALIASES)  # our backend's validation
    assert model == "open-jev" and [(q.qid, q.type) for q in questions] == [("q", "noul")]


def test_client_bench_small() -> None:
    result = run_client_bench(n=50, warmup=5).to_json()  # as the result file holds it
    assert set(result["clients"]) == {
        "raw-socket", "timed-client", "timed-client-wall", "handwritten-framing", "handwritten-framing-wall", "httpx"
    }
    assert all(c["n"] == 50 for c in result["clients"].values())
    assert result["clients"]["raw-socket"]["p50_ratio_to_raw"] == 1.0
    assert result["timed_client_connections_opened"] == 1
    assert result["handwritten_framing_connections_opened"] == 1
    clients = result["clients"]
    expected_cost = (clients["timed-client"]["p50_us"] - clients["handwritten-framing"]["p50_us"]) / clients["raw-socket"]["p50_us"]
    assert result["h11_cost_p50_over_raw_p50"] == pytest.approx(expected_cost, abs=1e-3)
    assert result["body_sha256"] == hashlib.sha256(SYSTEMONE_RESPONSE).hexdigest()
    assert result["machine"]["cores"] >= 1 and result["format_version"] == 1
    assert list(result)[:5] == ["format_version", "benchmark", "date", "machine", "command"]  # the header first
    assert list(clients["httpx"]) == ["n", "p50_us", "p99_us", "mean_us", "min_us", "p50_ratio_to_raw"]
    last = ClientBenchResult.table(msgspec.convert(result, ClientBenchResult)).splitlines()[-1]
    assert last.startswith("timed-client/raw-socket p50 ratio: ")
    float(last.rsplit(" ", 1)[1])


def test_calibration_small() -> None:
    cal = calibrate_client_overhead(n=50)
    assert cal["n"] == 50 and cal["connections_opened"] == 1
    assert 0 < cal["min_us"] <= cal["p50_us"] <= cal["p99_us"]
    assert "TimedClient" in cal["method"]


def test_summarize_ns_rules() -> None:
    s = summarize_ns(list(range(1000, 101_000, 1000)))  # 1..100 µs
    assert (s.n, s.p50_us, s.p99_us, s.min_us) == (100, 50.5, 99.0, 1.0)


@pytest.mark.parametrize("text, expected", [("1M", [1 << 20]), ("2K,3", [2048, 3]), ("1G, 512MiB", [1 << 30, 512 << 20])])
def test_parse_sizes(text, expected) -> None:
    assert parse_sizes(text) == expected


@pytest.mark.parametrize("text", ["", "0M", "1T", "big", "1M,,1M"])
def test_parse_sizes_refuses_nonsense(text) -> None:
    with pytest.raises(BenchUsageError, match="not a positive size"):
        parse_sizes(text)


def test_generated_files_are_deterministic_random_and_reused(tmp_path) -> None:
    a = ensure_files(tmp_path / "a", [1 << 20, 1000])
    b = ensure_files(tmp_path / "b", [1 << 20, 1000])
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    data = a[0].read_bytes()
    assert len(data) == 1 << 20 and data[:1000] != a[1].read_bytes()  # files differ from each other
    assert len(set(data)) == 256 and data.count(0) < len(data) // 100  # not zeros
    mtime = a[0].stat().st_mtime_ns
    ensure_files(tmp_path / "a", [1 << 20, 1000])
    assert a[0].stat().st_mtime_ns == mtime


def test_hash_bench_small(tmp_path) -> None:
    record = run_hash_bench([1 << 20, 1 << 20], tmp_path, rounds=2)
    result = record.to_json()  # as the result file holds it
    assert set(result["cases"]) == {"single", "several"}
    several = result["cases"]["several"]
    assert several["bytes"] == 2 << 20 and len(several["ours"]["seconds"]) == 2
    assert list(several) == ["files", "bytes", "ours", "sha256sum", "ours-1-worker", "ratio_median", "ratio_best",
                             "parallel_speedup_median"]
    assert "ours-1-worker" not in result["cases"]["single"] and "parallel_speedup_median" not in result["cases"]["single"]
    assert "warm" in result["cache"]
    table = record.table()
    assert "ours/sha256sum throughput ratio" in table and "several ours parallel/1-worker: " in table
    assert table.count("ours-1-worker") == 1  # one row of the several-files case


def test_hash_bench_single_file_has_no_several_case(tmp_path) -> None:
    assert set(run_hash_bench([4096], tmp_path, rounds=1).cases) == {"single"}


def run_invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return invoke(*args, cwd=ROOT)


def test_cli_bench_client_writes_json_and_ends_with_the_ratio(tmp_path) -> None:
    out = tmp_path / "client.json"
    proc = run_invoke("bench-client", "--requests", "30", "--warmup", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("timed-client/raw-socket p50 ratio: ")
    data = json.loads(out.read_text())
    assert data["benchmark"] == "client" and data["requests_per_client"] == 30
    assert "bench-client" in data["command"]


def test_cli_bench_hash_and_bad_sizes(tmp_path) -> None:
    out = tmp_path / "hash.json"
    proc = run_invoke("bench-hash", "--sizes", "64K,64K", "--dir", str(tmp_path), "--rounds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["cases"]["several"]["files"] == 2
    proc = run_invoke("bench-hash", "--sizes", "1X", "--dir", str(tmp_path), "--out", "")
    assert proc.returncode == 1
    assert "size '1X' is not a positive size" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_bench_calibrate_prints_json() -> None:
    proc = run_invoke("bench-calibrate", "--requests", "20")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["n"] == 20


def test_loopback_server_exits_when_its_parent_dies() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", ("from openjev_repro.bench.loopback_server import LoopbackServer as S; s = S().__enter__(); "
         "print(s._proc.pid, flush=True); import os; os._exit(0)")],
        stdout=subprocess.PIPE, text=True,
    )
    child = int(parent.stdout.readline())
    parent.wait(timeout=10)
    parent.stdout.close()
    for _ in range(100):
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":  # exited; only waiting for a PID 1 that may never reap it
            return
        time.sleep(0.05)
    os.kill(child, 9)
    pytest.fail("the loopback server outlived its parent")


def run_elsewhere(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`invoke` in a scratch folder holding only tasks.py: what a default writes lands there."""
    shutil.copyfile(ROOT / "tasks.py", cwd / "tasks.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*INVOKE, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env=env)


def test_benchmarks_write_under_cache_by_default_and_bench_results_only_with_record(tmp_path) -> None:
    done = run_elsewhere(tmp_path, "bench-client", "--requests", "20", "--warmup", "2")
    assert done.returncode == 0, done.stderr
    written = list((tmp_path / ".cache" / "bench").glob("client-*.json"))
    assert len(written) == 1 and f"wrote {written[0].relative_to(tmp_path)}" in done.stdout
    assert not (tmp_path / "bench-results").exists()
    recorded = run_elsewhere(tmp_path, "bench-client", "--requests", "20", "--warmup", "2", "--record")
    assert recorded.returncode == 0, recorded.stderr
    assert json.loads((tmp_path / "bench-results" / "client.json").read_text())["benchmark"] == "client"
    both = run_elsewhere(tmp_path, "bench-client", "--record", "--out", "x.json")
    assert both.returncode == 1 and both.stderr.startswith("error: give --out or --record")


def test_bench_hash_names_its_directory_and_disk_shows_progress_and_says_what_it_left(tmp_path) -> None:
    files = tmp_path / "files"
    done = run_elsewhere(tmp_path, "bench-hash", "--sizes", "64K,64K", "--dir", str(files), "--rounds", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"files in {files}, on /") and " free; generating 0.1 MiB" in lines[0], lines
    assert any("round 2 of 2" in line for line in lines), lines
    assert lines[-1].startswith(f"left 0.1 MiB of benchmark files in {files}"), lines
    (files / "mine.txt").write_text("not the benchmark's")
    cleaned = run_elsewhere(tmp_path, "bench-hash", "--sizes", "64K", "--dir", str(files), "--rounds", "1",
                            "--clean", "--out", "")
    assert cleaned.returncode == 0, cleaned.stderr
    assert [p.name for p in files.iterdir()] == ["mine.txt"]  # only its own files are removed
    assert cleaned.stderr.splitlines()[-1] == f"left none of its files in {files}"


@pytest.mark.parametrize("answer, body, trailers", [
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", {}),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
     b"hello world", {"x-t": "1"}),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", b"abc", {}),
    (b"HTTP/1.0 200 OK\r\n\r\nto the end", b"to the end", {}),  # framed by the server's close
])
def test_the_handwritten_framing_reads_interim_chunked_and_close_framed_answers(answer, body, trailers) -> None:
    """The baseline bench-client measures h11 against: the framings it must get right, from a real socket."""
    from openjev_repro.bench.handwritten_client import HandwrittenFramingClient

    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for i in range(0, len(answer), 7):  # in pieces, so every wait for more bytes is taken
                conn.sendall(answer[i:i + 7])
                time.sleep(0.001)

    server = threading.Thread(target=serve)
    server.start()
    client = HandwrittenFramingClient("127.0.0.1", listener.getsockname()[1], timeout_s=10)
    try:
        r = client.request("POST", "/v1/systemone", b"{}", {"Content-Type": "application/json"})
    finally:
        client.close()
        server.join()
        listener.close()
    assert (r.status, r.body, r.trailers) == (200, body, trailers)
