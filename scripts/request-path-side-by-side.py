#!/usr/bin/env python3
"""Two pieces of the reference server's request path, in process, from several checkouts side by side:
`prompts.parse_request` on every request of a file, and the handler's `_send` (the answer's JSON, the
response head and one write into a buffer) on a response of the fixture's shape. Each checkout runs in
its own interpreter (PYTHONPATH=checkout), in turn, `--rounds` times; printed per checkout: the median
and the minimum microseconds per request of each piece. No server, no socket: the served overhead as
a whole is scripts/served-overhead-side-by-side.py's.

Usage:
    .venv/bin/python scripts/request-path-side-by-side.py --checkout /work/main --checkout . \\
        --requests .cache/demo/requests/demo-noul-upstream.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# Run inside each checkout's interpreter: prints {"parse_us": [...], "send_us": [...]} (one figure per round).
PROBE = r'''
import io, json, sys, time
from openjev_repro.backend import server as srv
from openjev_repro.backend.prompts import MODEL_ALIASES, parse_request
tasks = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
bodies = [{"model": "open-jev", "state": t["state"], "questions": {"q": t["question"]}} for t in tasks]
answer = {"model": "open-jev", "answers": {"q": {"type": "noul", "noul": 0.6009097355563858}},
          "usage": {"input_tokens": 87, "output_tokens": 0},
          "metadata": {"method": "scalar_head", "temperature": 2.5343690298472983, "candidate_sequences": 1,
                       "candidate_tokens": [87], "inference_seconds": 0.0123456789, "prefix_cache": False,
                       "checkpoint_sha256": "0" * 64, "base_revision": "fixture", "max_length": 4096,
                       "backbone_parameter_dtypes": ["float32"], "code_commit": "side-by-side", "mode": "fast",
                       "prompt_format": "upstream", "device": "cpu",
                       "implementations": {"linear_attention_layers": 3, "full_attention": "sdpa"},
                       "cuda_graphs": None}}
handler = object.__new__(srv._Handler)
handler.request_version, handler.close_connection = "HTTP/1.1", False
handler.requestline, handler.command, handler.client_address = "POST /v1/systemone HTTP/1.1", "POST", ("127.0.0.1", 1)
parse, send = [], []
for _ in range(int(sys.argv[2])):
    started = time.perf_counter()
    for _ in range(20):
        for body in bodies:
            parse_request(body, MODEL_ALIASES)
    parse.append((time.perf_counter() - started) / (20 * len(bodies)) * 1e6)
    handler.wfile = io.BytesIO()
    started = time.perf_counter()
    for _ in range(500):
        handler._send(200, answer, {"X-Queue-Time-Ms": "0.123"})
        handler._headers_buffer = []
    send.append((time.perf_counter() - started) / 500 * 1e6)
print(json.dumps({"parse_us": parse, "send_us": send}))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, action="append", required=True)
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--turns", type=int, default=2, help="times each checkout runs, alternating")
    args = parser.parse_args()
    figures: dict[Path, dict[str, list[float]]] = {c: {"parse_us": [], "send_us": []} for c in args.checkout}
    for turn in range(args.turns):
        for checkout in args.checkout if turn % 2 == 0 else args.checkout[::-1]:
            env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
            out = subprocess.run([sys.executable, "-c", PROBE, str(args.requests.resolve()), str(args.rounds)],
                                 capture_output=True, text=True, env=env, check=False, cwd=checkout)
            if out.returncode != 0:
                print(f"error: the probe failed in {checkout}: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                return 1
            for key, values in json.loads(out.stdout).items():
                figures[checkout][key] += values
    for checkout, got in figures.items():
        summary = {key: {"median": round(sorted(v)[len(v) // 2], 2), "min": round(min(v), 2)} for key, v in got.items()}
        print(json.dumps({"checkout": str(checkout), **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
