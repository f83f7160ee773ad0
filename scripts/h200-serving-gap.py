#!/usr/bin/env python3
"""Where does the served path lose time against in-process inference? (H200 diagnostic.)

The 27B-shape study measured reference-raw at about 300 ms per request through the runner,
while `scripts/h200-raw-spread.py` timed the same model and requests in-process at about
150 ms. This script builds one model and times the 74 requests under each serving condition
in turn, one pass each, so the differences are measured side by side in one process:

    main         in-process, the main thread (the spread script's path)
    thread       in-process, a fresh thread per request (the server's path before 2026-12-01)
    worker       in-process, one long-lived worker thread for every request
    http         our ReferenceServer on loopback, one TimedClient connection (the runner's path;
                 inference on the server's long-lived model thread)
    main+nvml    in-process, while a second process reads NVML memory every 100 ms
                 (the runner's memory sampler)
    http+nvml    the served path with that sampler running (what a study measures)
    main again   the first condition repeated, to show the drift of the machine itself

Usage (on the H200, repo on PYTHONPATH, fixture in .cache/demo):
    python3 scripts/h200-serving-gap.py --out $OUT/serving-gap.json [--mode raw|fast] [--cuda-graphs 64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SAMPLER = """
import sys, time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
n = 0
while sys.stdin.readable():
    t = time.monotonic()
    pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    n += 1
    time.sleep(max(0.0, 0.1 - (time.monotonic() - t)))
"""


def _stats(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {"n": len(s), "mean_ms": round(statistics.fmean(s), 3), "p50_ms": round(statistics.median(s), 3),
            "p95_jevbench_ms": round(s[int(0.95 * len(s)) - 1], 3), "min_ms": round(s[0], 3),
            "max_ms": round(s[-1], 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--mode", choices=("raw", "fast"), default="raw")
    p.add_argument("--cuda-graphs", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=4)
    p.add_argument("--config", type=Path, default=REPO / "recipes" / "configs" / "qwen3_5-27b-text.json")
    p.add_argument("--tokenizer", type=Path, default=REPO / ".cache" / "demo" / "checkpoint" / "base")
    p.add_argument("--requests", type=Path, default=REPO / ".cache" / "demo" / "requests" / "h200-74-lengths.jsonl")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    if args.out.exists():
        p.error(f"{args.out} exists; outputs never overwrite evidence")
    sys.path.insert(0, str(REPO))
    import torch

    from openjev_repro.backend.model import DecisionModel, Settings
    from openjev_repro.backend.prompts import MODEL_ALIASES, parse_request
    from openjev_repro.backend.server import ReferenceServer, StaticMeta
    from openjev_repro.study.timed_client import TimedClient

    torch.set_num_threads(args.torch_threads)
    tasks = [json.loads(line) for line in args.requests.read_text().splitlines() if line.strip()]
    bodies = [{"model": MODEL_ALIASES[0], "state": t["state"], "questions": {t["id"]: t["question"]}} for t in tasks]
    wires = [json.dumps(b).encode() for b in bodies]
    settings = Settings(mode=args.mode, device=args.device, max_length=16384, cuda_graphs=args.cuda_graphs,
                        prompt_format="criteria-hidden")  # the renderer of the committed H200 recipes
    t0 = time.perf_counter()
    model = DecisionModel.from_random(args.config, args.tokenizer, 0, settings)
    print(f"built {args.mode} model in {time.perf_counter() - t0:.1f} s", flush=True)

    def in_process(i: int) -> float:
        start = time.perf_counter_ns()
        _, state, questions = parse_request(json.loads(wires[i]), MODEL_ALIASES)
        model.answer(state, questions, model.candidates(state, questions))
        return (time.perf_counter_ns() - start) / 1e6

    def in_thread(i: int) -> float:
        out: list[float] = []
        th = threading.Thread(target=lambda: out.append(in_process(i)))
        th.start()
        th.join()
        return out[0]

    worker = ThreadPoolExecutor(max_workers=1)

    def on_worker(i: int) -> float:
        return worker.submit(in_process, i).result()

    server = ReferenceServer(("127.0.0.1", 0), StaticMeta(base_model_id="random-init", method="scalar_head",
                                                          checkpoint_sha256=None, base_revision="seed-0",
                                                          code_commit="diagnostic"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.attach(model)
    client = TimedClient("127.0.0.1", server.server_address[1], timeout_s=120)

    def over_http(i: int) -> float:
        response = client.request("POST", "/v1/systemone", wires[i], {"Content-Type": "application/json"})
        assert response.status == 200, response.status
        return response.latency_ns / 1e6

    for i in [max(range(len(wires)), key=lambda k: len(wires[k])), 0, 1, *range(len(wires))]:
        in_process(i)  # warm-up (and graph captures in graph mode): every length once
    results: dict[str, dict] = {}

    def timed(name: str, fn) -> None:
        ms = [fn(i) for i in range(len(wires))]
        results[name] = {**_stats(ms), "latencies_ms": [round(v, 3) for v in ms]}
        r = results[name]
        print(f"{name:<12} mean {r['mean_ms']:9.3f}  P50 {r['p50_ms']:9.3f}  P95 {r['p95_jevbench_ms']:9.3f}  "
              f"min {r['min_ms']:8.3f} ms", flush=True)

    timed("main", in_process)
    timed("thread", in_thread)
    timed("worker", on_worker)
    timed("http", over_http)
    sampler = subprocess.Popen([sys.executable, "-c", SAMPLER], stdin=subprocess.PIPE)
    try:
        time.sleep(0.5)
        timed("main+nvml", in_process)
        timed("http+nvml", over_http)
    finally:
        sampler.kill()
        sampler.wait()
    timed("main again", in_process)
    client.close()
    server.shutdown()
    args.out.write_text(json.dumps({"format_version": 1, "mode": args.mode, "cuda_graphs": args.cuda_graphs,
                                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "nproc": os.cpu_count(),
                                    "implementations": model.implementations,
                                    "conditions": results}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
