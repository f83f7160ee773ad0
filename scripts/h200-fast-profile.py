#!/usr/bin/env python3
"""Where fast mode's time goes at the 27B shape on an H200, and how far its decisions are from raw's.

One process builds one fast-mode model (seed 0, the study's weights) and measures, side by side:

    hardware     bf16 matmul TFLOP/s (8192^3 and the model's own GEMM shapes) and device copy
                 bandwidth (bytes read + written per second), the inputs of the floor
    requests     the 74 requests, each split into tokenize / forward (CUDA events) / total, in
                 process, with graph replay (after every length was captured once)
    http         the same 74 requests through our ReferenceServer on loopback (the runner's path),
                 with latency minus the server's inference_seconds: what serving adds
    profile      torch.profiler over one eager forward at a short and a long length: self CUDA
                 time per kernel (graph replay runs the same kernels without launch gaps)
    decisions    probabilities against the committed raw run of the same weights

Variants (--merge): peft (PEFT's merge_and_unload, BF16 arithmetic), fp32 (delta W computed and
added in FP32, rounded to BF16 once), none (LoRA left unmerged, applied by PEFT at run time).

Usage (on the H200, repo on PYTHONPATH, fixture in .cache/demo):
    python3 scripts/h200-fast-profile.py --out $OUT/fast-profile-peft --merge peft
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAW_RUN = REPO / "results" / "h200-reference-27b-shape" / "run"


def _stats(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {"n": len(s), "mean_ms": round(statistics.fmean(s), 3), "p50_ms": round(statistics.median(s), 3),
            "p95_jevbench_ms": round(s[int(0.95 * len(s)) - 1], 3), "min_ms": round(s[0], 3),
            "max_ms": round(s[-1], 3)}


def hardware(torch) -> dict:
    """The backend's own ceilings (backend/hardware.py) plus the model's GEMM shapes at five lengths."""
    from openjev_repro.backend.hardware import measure_hardware, median_event_ms

    out: dict = {**measure_hardware(torch.device("cuda")).to_json(), "torch": torch.__version__}
    gemms = {}
    f = torch.nn.functional.linear
    for m in (96, 300, 936, 2312, 3399):
        for k, n in ((5120, 17408 * 2), (17408, 5120), (5120, 10240 + 2 * 2048)):
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
            ms = median_event_ms(torch, functools.partial(f, x, w), 3, 20)
            gemms[f"{m}x{k}x{n}"] = {"ms": round(ms, 4), "tflops": round(2 * m * k * n / (ms / 1e3) / 1e12, 1),
                                     "weight_tbps": round(n * k * 2 / (ms / 1e3) / 1e12, 2)}
    out["linear_gemms"] = gemms
    return out


def merge_fp32(model) -> object:
    """LoRA merged as W + scaling * (B @ A), computed in FP32 and rounded to the weight dtype once."""
    import torch

    with torch.no_grad():
        for _name, module in model.named_modules():
            lora_a = getattr(module, "lora_A", None)
            if lora_a is None or "default" not in lora_a:
                continue
            weight = module.base_layer.weight
            delta = module.lora_B["default"].weight.float() @ module.lora_A["default"].weight.float()
            weight.copy_((weight.float() + module.scaling["default"] * delta).to(weight.dtype))
    return model.unload()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--merge", choices=("peft", "fp32", "none"), default="peft")
    p.add_argument("--cuda-graphs", type=int, default=64)
    p.add_argument("--skip-hardware", action="store_true")
    p.add_argument("--compile", action="store_true", help="the backend's --compile (fused RMSNorm and SiLU gate)")
    p.add_argument("--prompt-ids", default="template", choices=("template", "cached", "cached-parallel"))
    p.add_argument("--fuse", default="", help="the backend's --fuse list (conv-silu, concat-in-proj, concat-gate-up, add-norm, all)")
    p.add_argument("--skip-profile", action="store_true")
    p.add_argument("--device", default="cuda", help="cpu: a dry run of the script on a small config")
    p.add_argument("--config", type=Path, default=REPO / "recipes" / "configs" / "qwen3_5-27b-text.json")
    p.add_argument("--tokenizer", type=Path, default=REPO / ".cache" / "demo" / "checkpoint" / "base")
    p.add_argument("--requests", type=Path, default=REPO / ".cache" / "demo" / "requests" / "h200-74-lengths.jsonl")
    p.add_argument("--prompt-format", default="criteria-hidden", choices=("upstream", "criteria-hidden"),
                   help="the backend's --prompt-format (criteria-hidden: as the earlier profiles ran; upstream with "
                        "h200-74-lengths-upstream.jsonl)")
    p.add_argument("--raw-run", type=Path, default=RAW_RUN,
                   help="the run whose reference-raw rows (first measured pass) vs_raw compares with; its requests "
                        "must be the ones given with --requests")
    args = p.parse_args()
    if args.out.exists():
        p.error(f"{args.out} exists; outputs never overwrite evidence")
    args.out.mkdir(parents=True)
    sys.path.insert(0, str(REPO))
    import peft
    import torch

    from openjev_repro.backend.fast_layers import parse_fusions
    from openjev_repro.backend.model import DecisionModel, Settings
    from openjev_repro.backend.prompts import MODEL_ALIASES, parse_request
    from openjev_repro.backend.server import ReferenceServer, StaticMeta
    from openjev_repro.study.timed_client import TimedClient

    torch.set_num_threads(4)
    def save() -> None:  # after every phase, so a run cut short still leaves what it measured
        (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")

    result: dict = {"format_version": 1, "merge": args.merge, "cuda_graphs": args.cuda_graphs, "compile": args.compile, "fuse": args.fuse,
                    "prompt_format": args.prompt_format, "requests": args.requests.name, "raw_run": str(args.raw_run)}
    if not args.skip_hardware:
        result["hardware"] = hardware(torch)
        print("hardware", json.dumps(result["hardware"])[:400], flush=True)
    if args.merge == "fp32":
        peft.PeftModel.merge_and_unload = merge_fp32  # type: ignore[method-assign]
    elif args.merge == "none":
        peft.PeftModel.merge_and_unload = lambda self: self  # type: ignore[method-assign]
    tasks = [json.loads(line) for line in args.requests.read_text().splitlines() if line.strip()]
    wires = [json.dumps({"model": MODEL_ALIASES[0], "state": t["state"], "questions": {t["id"]: t["question"]}}).encode()
             for t in tasks]
    cuda = args.device == "cuda"
    settings = Settings(mode="fast", device=args.device, max_length=16384, cuda_graphs=args.cuda_graphs if cuda else 0,
                        compile=args.compile, prompt_format=args.prompt_format,
                        fusions=parse_fusions(args.fuse), prompt_ids=args.prompt_ids)
    t0 = time.perf_counter()
    model = DecisionModel.from_random(args.config, args.tokenizer, 0, settings)
    result["build_s"] = round(time.perf_counter() - t0, 1)
    result["info"] = {k: model.describe().get(k) for k in ("weights_fingerprint", "merged_weights_fingerprint",
                                                     "implementations", "weights_bytes", "compiled", "fusions")}
    result["non_embedding_parameters"] = sum(p.numel() for n, p in model.backbone.named_parameters()
                                             if "embed_tokens" not in n)
    print("built", json.dumps(result["info"])[:300], flush=True)

    parsed = [parse_request(json.loads(w), MODEL_ALIASES) for w in wires]
    cands = [model.candidates(s, q) for _, s, q in parsed]
    lengths = [len(c[0].ids) for c in cands]
    # capture cost: first sight of each length
    capture_ms: dict[int, float] = {}
    for i, c in enumerate(cands):
        if lengths[i] in capture_ms:
            continue
        t = time.perf_counter()
        model.score(c[0].ids)
        capture_ms[lengths[i]] = (time.perf_counter() - t) * 1e3
    result["capture_ms"] = _stats(list(capture_ms.values()))
    print("captures", json.dumps(result["capture_ms"]), flush=True)
    save()

    per = []
    probs = {}
    for i, (_, state, questions) in enumerate(parsed):
        t = time.perf_counter_ns()
        c = model.candidates(state, questions)
        t_tok = time.perf_counter_ns()
        ids = torch.tensor([c[0].ids], dtype=torch.long, device=args.device)
        with torch.inference_mode():
            if cuda:
                ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ev0.record()
            out = model.graphs.run(model._forward, ids) if model.graphs else model._forward(ids)
            if cuda:
                ev1.record()
        s = float(out[0].item())
        gpu_ms = ev0.elapsed_time(ev1) if cuda else 0.0
        t_fwd = time.perf_counter_ns()
        answers = model.answer(state, questions, c)
        t_end = time.perf_counter_ns()
        probs[tasks[i]["id"]] = next(iter(answers.values()))["noul"]
        per.append({"tokens": lengths[i], "tokenize_ms": (t_tok - t) / 1e6, "gpu_forward_ms": gpu_ms,
                    "score_wall_ms": (t_fwd - t_tok) / 1e6, "answer_ms": (t_end - t_fwd) / 1e6, "s": s})
    result["in_process"] = {key: _stats([r[key] for r in per]) for key in
                            ("tokenize_ms", "gpu_forward_ms", "score_wall_ms", "answer_ms")}
    result["per_request"] = per
    print("in-process", json.dumps(result["in_process"]), flush=True)
    save()

    server = ReferenceServer(("127.0.0.1", 0), StaticMeta(base_model_id="random-init", method="scalar_head",
                                                          checkpoint_sha256=None, base_revision="seed-0",
                                                          code_commit="diagnostic"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.attach(model)
    client = TimedClient("127.0.0.1", server.server_address[1], timeout_s=120)
    lat, added = [], []
    for w in wires:
        response = client.request("POST", "/v1/systemone", w, {"Content-Type": "application/json"})
        assert response.status == 200, response.status
        meta = json.loads(response.body)["metadata"]
        lat.append(response.latency_ns / 1e6)
        added.append(response.latency_ns / 1e6 - meta["inference_seconds"] * 1e3)
    client.close()
    server.shutdown()
    result["http"] = {"latency": _stats(lat), "latency_minus_inference_seconds": _stats(added)}
    print("http", json.dumps(result["http"]), flush=True)
    save()

    rows = [json.loads(line) for line in (args.raw_run / "rows.jsonl").read_text().splitlines()]
    raw = {r["id"]: r["probability"] for r in rows if r["backend"] == "reference-raw" and r["phase"] == "measured"
           and r["pass_index"] == 1}
    diffs = {k: abs(probs[k] - raw[k]) for k in raw if k in probs}
    from openjev_repro.decision import YES_THRESHOLD

    flips = [k for k in diffs if (probs[k] >= YES_THRESHOLD) != (raw[k] >= YES_THRESHOLD)]
    result["vs_raw"] = {"compared": len(diffs), "max_probability_delta": max(diffs.values()),
                        "mean_signed_delta": statistics.fmean(probs[k] - raw[k] for k in diffs),
                        "decision_flips": len(flips),
                        "raw_margin_of_flipped": sorted(abs(raw[k] - 0.5) for k in flips)}
    print("vs raw", json.dumps(result["vs_raw"]), flush=True)
    save()

    if not args.skip_profile:
        from torch.profiler import ProfilerActivity, profile
        for target in (100, 2312):
            i = min(range(len(lengths)), key=lambda k: abs(lengths[k] - target))
            ids = torch.tensor([cands[i][0].ids], dtype=torch.long, device=args.device)
            with torch.inference_mode():
                model._forward(ids)
                activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
                with profile(activities=activities, record_shapes=True) as prof:
                    model._forward(ids)
                    if cuda:
                        torch.cuda.synchronize()
            table = prof.key_averages().table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=45, max_name_column_width=70)
            (args.out / f"profile-{lengths[i]}.txt").write_text(table + "\n")
            by_shape = prof.key_averages(group_by_input_shape=True).table(
                sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=40,
                max_name_column_width=40, max_shapes_column_width=90)
            (args.out / f"profile-{lengths[i]}-by-shape.txt").write_text(by_shape + "\n")
            kernels = [e for e in prof.key_averages() if e.self_device_time_total > 0]
            total = sum(e.self_device_time_total for e in kernels)
            gemm = sum(e.self_device_time_total for e in kernels
                       if any(s in e.key.lower() for s in ("gemm", "nvjet", "cutlass", "sm90_xmma")))
            result[f"profile_{lengths[i]}"] = {"cuda_total_ms": total / 1e3, "gemm_ms": gemm / 1e3,
                                               "kernel_launches": sum(e.count for e in kernels)}
            print(f"profile {lengths[i]}", json.dumps(result[f"profile_{lengths[i]}"]), flush=True)
    save()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
