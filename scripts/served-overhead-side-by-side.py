#!/usr/bin/env python3
"""The reference server's served overhead from two checkouts, side by side (CPU, fixture).

Starts `python -m openjev_repro.backend` from each checkout (same flags, one loopback port each),
then sends every request of the file to both in turn, alternating which goes first, one keep-alive
connection per server, and prints per checkout the median and mean of the served overhead: the
client's latency minus the server's own `metadata.inference_seconds`, which is what the HTTP
path, parsing, tokenizing and (since 2026-12-02) the model queue add to an inference.

Usage:
    .venv/bin/python scripts/served-overhead-side-by-side.py --checkout /work/main --checkout . \\
        --checkpoint .cache/fixture/checkpoint --requests .cache/fixture/requests/demo-noul-upstream.jsonl
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def start(checkout: Path, checkpoint: Path, log: Path) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OPENJEV_CODE_COMMIT": "side-by-side"}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "openjev_repro.backend", "--checkpoint", str(checkpoint.resolve()),
                                 "--mode", "fast", "--port", "0", "--threads", "1"], cwd=checkout, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    while True:
        events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"event"')]
        if any(e["event"] == "ready" for e in events):
            return proc, next(e["port"] for e in events if e["event"] == "listening")
        if proc.poll() is not None:
            raise SystemExit(f"error: the server of {checkout} exited:\n{log.read_text()}")
        time.sleep(0.2)


def overhead_ms(conn: http.client.HTTPConnection, body: bytes) -> float:
    started = time.perf_counter()
    conn.request("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    latency = time.perf_counter() - started
    if response.status != 200:
        raise SystemExit(f"error: {response.status} {data[:200]!r}")
    return (latency - json.loads(data)["metadata"]["inference_seconds"]) * 1000


def alternate(conns: list[http.client.HTTPConnection], bodies: list[bytes], passes: int) -> list[list[float]]:
    """Every body to every server in turn, which goes first alternating; the overheads per server."""
    got: list[list[float]] = [[] for _ in conns]
    for number in range(passes):
        for index, body in enumerate(bodies):
            order = list(range(len(conns)))
            for which in order if (index + number) % 2 == 0 else order[::-1]:
                got[which].append(overhead_ms(conns[which], body))
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, action="append", required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    bodies = [json.dumps({"model": "open-jev", "state": t["state"], "questions": {"q": t["question"]}}).encode()
              for t in map(json.loads, args.requests.read_text().splitlines())]
    servers = [start(c.resolve(), args.checkpoint, Path(f"/tmp/side-by-side-{n}.log")) for n, c in enumerate(args.checkout)]
    try:
        got = alternate([http.client.HTTPConnection("127.0.0.1", port, timeout=120) for _, port in servers],
                        bodies, args.passes)
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(timeout=30)
    for checkout, values in zip(args.checkout, got, strict=True):
        print(json.dumps({"checkout": str(checkout), "requests": len(values),
                          "overhead_median_ms": round(statistics.median(values), 3),
                          "overhead_mean_ms": round(statistics.fmean(values), 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
