#!/usr/bin/env python3
"""Where the served overhead goes: the reference server's request path timed stage by stage (diagnostic).

Served overhead is the client's latency minus the server's `metadata.inference_seconds`. This script
copies `openjev_repro` into a temporary directory, adds timestamps to that copy of `backend/server.py`
(each edit must apply exactly once, or the script stops), starts the copy with the given server
arguments, sends every request of the file through the study's TimedClient on one keep-alive
connection (one unmeasured pass, then `--passes`), and prints the median and mean of each stage:

    head+body     first byte of the request seen -> body read whole (HTTP parsing, reading)
    parse_body    JSON parsing and the body's limits
    parse_request the request's fields checked (prompts.parse_request)
    candidates    rendering and tokenising every candidate (model.candidates)
    turn          taking the model from the queue
    inference     model.answer: what `inference_seconds` reports
    metadata      the response's metadata block
    rest          the remainder: response encoding and writing, the client's own work, loopback

The committed server is never changed; only the temporary copy is timed.

Usage:
    python3 scripts/serving-stages.py --requests FILE [--passes 2] [--out stages.json] -- SERVER ARGS...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("head+body", "parse_body", "parse_request", "candidates", "turn", "inference", "metadata")
EDITS = (
    ("        refused, body = _parse_body(raw)\n",
     ("        T = [time.perf_counter()]\n        refused, body = _parse_body(raw)\n"
      "        T.append(time.perf_counter())\n")),
    ("            candidates = self.model.candidates(state, questions)\n",
     ("            T.append(time.perf_counter())\n            candidates = self.model.candidates(state, questions)\n"
      "            T.append(time.perf_counter())\n")),
    ("            started = time.perf_counter()\n", "            started = time.perf_counter()\n            T.append(started)\n"),
    ('                     "metadata": self._metadata(seconds, tokens)}',
     '                     "metadata": _staged(self, T, seconds, tokens)}'),
    ("        self.server.deadlines.start(id(self)",
     ("        self.server._first_byte = time.perf_counter()\n        self.server.deadlines.start(id(self)")),
)
HELPER = '''

def _staged(server, T, seconds, tokens):
    T.append(T[-1] + seconds)  # T[-1] is when the inference started
    meta = server._metadata(seconds, tokens)
    T.append(time.perf_counter())
    first = getattr(server, "_first_byte", T[0])
    meta["serving_stages_ms"] = [(T[0] - first) * 1e3, *[(b - a) * 1e3 for a, b in zip(T, T[1:])]]
    return meta
'''


def instrumented_copy(into: Path) -> Path:
    shutil.copytree(REPO / "openjev_repro", into / "openjev_repro", ignore=shutil.ignore_patterns("__pycache__"))
    path = into / "openjev_repro" / "backend" / "server.py"
    text = path.read_text()
    for old, new in EDITS:
        if text.count(old) != 1:
            raise SystemExit(f"error: server.py changed; the edit for {old.strip()[:50]!r} no longer applies once")
        text = text.replace(old, new)
    path.write_text(text + HELPER)
    return into


def start(root: Path, server_args: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    # -P: the copy, not the checkout in the working directory, is what runs
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OPENJEV_CODE_COMMIT": "serving-stages"}
    with open(log, "wb") as err:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-P", "-m", "openjev_repro.backend", *server_args, "--port", "0"],
                                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
    while True:
        events = [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith('{"event"')]
        if any(e.get("event") == "ready" for e in events):
            return proc, next(e["port"] for e in events if e.get("event") == "listening")
        if proc.poll() is not None:
            raise SystemExit(f"error: the server exited before it was ready; its log: {log}")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("server_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from openjev_repro.study.timed_client import TimedClient

    server_args = [a for a in args.server_args if a != "--"]
    bodies = [json.dumps({"model": "open-jev", "state": t["state"], "questions": {t["id"]: t["question"]}}).encode()
              for t in map(json.loads, args.requests.read_text().splitlines())]
    rows: list[list[float]] = []
    with tempfile.TemporaryDirectory(prefix="serving-stages-") as tmp:
        proc, port = start(instrumented_copy(Path(tmp)), server_args, Path(tmp) / "server.log")
        try:
            client = TimedClient("127.0.0.1", port, timeout_s=120)
            for number in range(args.passes + 1):
                for body in bodies:
                    response = client.request("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
                    if response.status != 200:
                        raise SystemExit(f"error: HTTP {response.status}: {response.body[:200]!r}")
                    if number:  # the first pass warms (graph captures, compiles) and is not measured
                        stages = json.loads(response.body)["metadata"]["serving_stages_ms"]
                        latency = (response.end_ns - response.start_ns) / 1e6
                        rows.append([latency, *stages, latency - sum(stages)])
                print(f"pass {number} done", file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    names = ("latency", *STAGES, "rest")
    table = {name: {"median_ms": round(statistics.median(r[i] for r in rows), 4),
                    "mean_ms": round(statistics.fmean(r[i] for r in rows), 4)} for i, name in enumerate(names)}
    served = [r[0] - r[STAGES.index("inference") + 1] for r in rows]
    table["served overhead"] = {"median_ms": round(statistics.median(served), 4), "mean_ms": round(statistics.fmean(served), 4)}
    print("| stage | median ms | mean ms |\n| --- | ---: | ---: |")
    for name, row in table.items():
        print(f"| {name} | {row['median_ms']:.3f} | {row['mean_ms']:.3f} |")
    if args.out:
        args.out.write_text(json.dumps({"requests": len(rows), "server_args": server_args, "stages": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
