#!/usr/bin/env python3
"""What drives the reference backend's raw-mode latency spread: torch threads and warm-up, in one process.

Builds the model once (the backend's own code: `DecisionModel.from_random`, seeded weights), then
times the request file's requests in-process (tokenize + inference, no HTTP) under each setting:
torch intra-op threads (torch.set_num_threads) x {no warm-up, fresh warm-up}, each over every
request `--repeats` times. Prints a table (mean / P50 / P95 / min / max per setting) with the CPU
model, frequency governor, nproc and load average, and writes everything as JSON to `--out`.

Needs only torch, transformers, peft and the tokenizers (no invoke, no pydantic): run it from
the repository root with PYTHONPATH=. , e.g. on an H200 (about 2 min to build the 27B shape,
about 17 s per raw pass of the 74 requests):

    PYTHONPATH=. python3 scripts/h200-raw-spread.py --out raw-spread.json
    # CPU check with the fixture's tiny config (seconds):
    PYTHONPATH=. python3 scripts/h200-raw-spread.py --config .cache/demo/checkpoint/base/config.json \\
        --device cpu --threads 1,2 --out /tmp/raw-spread.json

The request file and tokenizer come from `invoke fixture --out .cache/demo`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _collect_cpu() -> dict[str, Any]:
    """openjev_repro.manifest.environment.collect_cpu, loaded alone (the package needs cryptography)."""
    path = REPO / "openjev_repro" / "manifest" / "environment.py"
    spec = importlib.util.spec_from_file_location("_openjev_environment", path)
    if spec is None or spec.loader is None:
        return {"available": False, "reason": f"cannot load {path}"}
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.collect_cpu()


def _stats(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"n": len(ms), "mean_ms": round(math.fsum(ms) / len(ms), 3), "p50_ms": round(statistics.median(ms), 3),
            "p95_jevbench_ms": round(ordered[max(int(0.95 * len(ms)) - 1, 0)], 3),
            "min_ms": round(ordered[0], 3), "max_ms": round(ordered[-1], 3)}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON output (must not exist)")
    p.add_argument("--config", type=Path, default=REPO / "recipes" / "configs" / "qwen3_5-27b-text.json")
    p.add_argument("--tokenizer", type=Path, default=REPO / ".cache" / "demo" / "checkpoint" / "base")
    p.add_argument("--requests", type=Path, default=REPO / ".cache" / "demo" / "requests" / "h200-74-lengths.jsonl")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=("raw", "fast"), default="raw")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="auto", help="auto: BF16 on CUDA, FP32 on CPU")
    p.add_argument("--threads", default="1,4,16", help="comma-separated torch intra-op thread counts")
    p.add_argument("--repeats", type=int, default=1, help="passes over every request per setting")
    p.add_argument("--warmup-requests", type=int, default=3, help="a fresh warm-up: the longest request + N-1")
    p.add_argument("--max-length", type=int, default=16384)
    args = p.parse_args(argv)
    try:
        args.thread_counts = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        p.error(f"--threads must be comma-separated whole numbers, not {args.threads!r}")
    if not args.thread_counts or min(args.thread_counts) < 1 or args.repeats < 1:
        p.error("--threads needs counts >= 1 and --repeats >= 1")
    if args.out.exists():
        p.error(f"{args.out} exists; outputs never overwrite evidence")
    for path in (args.config, args.tokenizer, args.requests):
        if not path.exists():
            p.error(f"{path} does not exist (run `invoke fixture --out .cache/demo` for the requests and tokenizer)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    sys.path.insert(0, str(REPO))
    import torch

    from openjev_repro.backend.model import DecisionModel, Settings
    from openjev_repro.backend.prompts import MODEL_ALIASES, parse_request

    tasks = [json.loads(line) for line in args.requests.read_text().splitlines() if line.strip()]
    bodies = [{"model": MODEL_ALIASES[0], "state": t["state"], "questions": {t["id"]: t["question"]}} for t in tasks]
    load_before = os.getloadavg()
    started = time.perf_counter()
    settings = Settings(mode=args.mode, device=args.device, dtype=args.dtype, max_length=args.max_length,
                        prompt_format="criteria-hidden")  # the renderer of the committed H200 recipes
    model = DecisionModel.from_random(args.config, args.tokenizer, args.seed, settings)
    build_s = time.perf_counter() - started
    print(f"built {args.mode} model in {build_s:.1f} s; weights {model.info.weights.weights_fingerprint}", flush=True)
    parsed = [parse_request(body, MODEL_ALIASES) for body in bodies]
    prepared = [(state, questions, model.candidates(state, questions)) for _, state, questions in parsed]
    longest = max(range(len(prepared)), key=lambda i: sum(len(c.ids) for c in prepared[i][2]))

    def one(i: int) -> float:
        state, questions, _ = prepared[i]
        t0 = time.perf_counter_ns()
        model.answer(state, questions, model.candidates(state, questions))   # .item() synchronises the GPU
        return (time.perf_counter_ns() - t0) / 1e6

    results = []
    for threads in args.thread_counts:
        for warm in (False, True):
            torch.set_num_threads(threads)
            if warm:
                for i in [longest, *range(args.warmup_requests - 1)]:
                    one(i)
            for repeat in range(1, args.repeats + 1):
                ms = [one(i) for i in range(len(prepared))]
                row = {"torch_threads": torch.get_num_threads(), "fresh_warmup": warm, "repeat": repeat,
                       **_stats(ms), "latencies_ms": [round(v, 3) for v in ms]}
                results.append(row)
                print(f"threads {threads:>3}  warm-up {'yes' if warm else 'no ':<3}  pass {repeat}  "
                      f"mean {row['mean_ms']:9.3f}  P50 {row['p50_ms']:9.3f}  P95 {row['p95_jevbench_ms']:9.3f}  "
                      f"min {row['min_ms']:8.3f}  max {row['max_ms']:9.3f} ms", flush=True)
    cpu = _collect_cpu()
    freq = cpu.get("cpufreq", {})
    report = {
        "format_version": 1,
        "command": " ".join([sys.executable, *sys.argv]),
        "mode": args.mode, "config": str(args.config), "seed": args.seed, "requests": len(prepared),
        "weights_fingerprint": model.info.weights.weights_fingerprint, "build_seconds": round(build_s, 1),
        "device": str(model.device), "dtype": str(model.dtype).removeprefix("torch."),
        "gpu": torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else None,
        "torch": torch.__version__, "python": platform.python_version(),
        "nproc": len(os.sched_getaffinity(0)), "cpu": cpu,
        "torch_interop_threads": torch.get_num_interop_threads(),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "implementations": model.implementations,
        "settings": results,
    }
    print(f"cpu {cpu.get('model')}; nproc {report['nproc']}; governor "
          f"{freq.get('scaling_governor', freq.get('reason'))}; load {report['load_average_before']} -> "
          f"{report['load_average_after']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.rename(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
