"""Hostile HTTP bodies and slow clients against the real reference backend (a subprocess on loopback).

Every malformed body gets a 400 (415 for a body that is not JSON at all) and the server keeps
serving; idle, header and connection limits are exercised with small values given on its
command line.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

pytestmark = pytest.mark.slow

GOOD = {"model": "open-jev", "state": "The meeting is on Monday.",
        "questions": {"q": {"type": "noul", "instructions": "Is the meeting on Monday?"}}}


@pytest.fixture(scope="module")
def server(start_server, fixture_checkpoint):
    proc = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw", "--max-length", "512",
                         "--idle-timeout", "1.5", "--header-timeout", "1.5", "--max-connections", "4"])
    proc.wait_ready()
    return proc


def post(server, raw: bytes) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/systemone", content=raw, headers={"Content-Type": "application/json"},
                      timeout=30)


@pytest.mark.parametrize("raw,status,message", [
    (b"[" * 100_000 + b"]" * 100_000, 400, "nested deeper than 64 levels"),
    (b'{"model": "open-jev", "n": ' + b"7" * 5000 + b"}", 400, "a value out of range"),
    (json.dumps({**GOOD, "state": "bad \ud800 text"}).encode(), 400, "lone UTF-16 surrogate"),
    (json.dumps({**GOOD, "questions": {"q\udfff": GOOD["questions"]["q"]}}).encode(), 400, "lone UTF-16 surrogate"),
    (b"\xff\xfe not json", 415, "not JSON"),
])
def test_malformed_bodies_get_an_answer_and_the_server_keeps_serving(server, raw, status, message):
    response = post(server, raw)
    assert response.status_code == status and message in response.json()["error"]["message"]
    assert post(server, json.dumps(GOOD).encode()).status_code == 200


def _connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return sock


def test_an_idle_connection_is_closed(server):
    sock = _connect(server)
    started = time.monotonic()
    assert sock.recv(1) == b""  # the server closes it; nothing was ever sent
    assert 1.0 < time.monotonic() - started < 8


def test_a_slow_header_is_cut_off(server):
    sock = _connect(server)
    started = time.monotonic()
    try:
        for byte in b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n":  # one byte every 0.3 s: never idle 1.5 s
            sock.sendall(bytes([byte]))
            time.sleep(0.3)
            if time.monotonic() - started > 8:
                break
    except OSError:
        pass  # cut off while we were still sending
    sock.settimeout(5)
    try:
        assert sock.recv(1024) == b""
    except ConnectionResetError:
        pass
    assert time.monotonic() - started < 8


def test_connections_beyond_the_limit_get_503(server):
    held = [_connect(server) for _ in range(4)]
    try:
        time.sleep(0.2)
        extra = _connect(server)
        extra.settimeout(5)
        answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"too_many_connections" in answer
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert post(server, json.dumps(GOOD).encode()).status_code == 200
