"""Command line of the reference backend: parse flags, check the checkpoint, bind, load, warm up, serve.

Exit status: 0 after SIGTERM/SIGINT, 2 for bad flags or an unusable checkpoint (before binding),
1 when loading or the warm-up inference fails. Progress goes to stderr as one JSON object per line
(`{"event": "listening", "port": N}` first, `{"event": "ready", ...}` when /health says ready).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ReproError
from .auth import ApiKey
from .fast_layers import parse_fusions
from .kernel_choice import KERNEL_CHOICES, apply_kernel_choice
from .model import METHOD, DecisionModel, Settings
from .package import package_sha256, read_package
from .prompts import DEFAULT_PROMPT_FORMAT, PROMPT_FORMATS
from .server import (
    COMPUTE_TIMEOUT_S,
    DEADLINE_CANDIDATES,
    HEADER_TIMEOUT_S,
    IDLE_TIMEOUT_S,
    MAX_CANDIDATES,
    MAX_CONNECTIONS,
    MAX_QUEUE,
    ReferenceServer,
    StaticMeta,
)
from .tracing import Tracing

__all__ = [
    "Loader",
    "build_parser",
    "load_model",
    "main",
]

# How main loads the model once the port is bound: the one test seam (docs/backend.md, "Fault injection").
Loader = Callable[[argparse.Namespace, Any], Any]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m openjev_repro.backend",
                                description="Open-Jev reference backend (/v1/systemone) for the fixture or a real package.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="package directory (model.json, adapter/, head.pt, temperature.json)")
    src.add_argument("--random-init", type=Path, metavar="CONFIG", help="Qwen3_5TextConfig JSON: random weights on the device")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-init")
    p.add_argument("--tokenizer", type=Path, help="tokenizer directory for --random-init")
    p.add_argument("--mode", choices=("raw", "fast"), default="raw")
    p.add_argument("--max-length", type=int, default=None, help="longest candidate in tokens (default: model.json, else 4096)")
    p.add_argument("--prompt-format", choices=PROMPT_FORMATS, default=DEFAULT_PROMPT_FORMAT,
                   help="how a request becomes prompts: upstream (Open-Jev's contract: noul criteria and choice "
                        "descriptions shown) or criteria-hidden (this project's renderer before 2026-12-01, "
                        f"for the recipes that name it); default {DEFAULT_PROMPT_FORMAT}")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8791, help="0 picks a free port (reported on stderr)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (auto: cuda if available)")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 (auto: FP32 on CPU, BF16 on CUDA)")
    p.add_argument("--cuda-graphs", type=int, default=0, metavar="N",
                   help="fast mode on CUDA: replay CUDA Graphs per exact length, keep N (LRU); 0 = off")
    p.add_argument("--kernels", choices=KERNEL_CHOICES, default="auto",
                   help="linear-attention kernels: reference (PyTorch's own, FLA blocked), fla (FLA required: "
                        "refuse to start without it; fast mode only) or auto (FLA whenever importable); "
                        "reported in /health as kernels")
    p.add_argument("--measure-hardware", action="store_true",
                   help="CUDA only: measure the GPU's BF16 matmul rate and copy bandwidth once after loading "
                        "(reported in /health as hardware: the inputs of a report's hardware floor)")
    p.add_argument("--compile", action="store_true",
                   help="fast mode on CUDA: fuse every RMSNorm and MLP SiLU gate into one kernel each with "
                        "torch.compile (compiled at the first inference)")
    p.add_argument("--fuse", default="", metavar="LIST",
                   help="fast mode: comma list of fusions (conv-silu, concat-in-proj, concat-gate-up, add-norm, gated-norm, "
                        "grouped-qk, beta-g, silu-mul, silu-mul-fp32, triton-gated-norm), all or none; reported in /health as "
                        "fusions (docs/backend.md)")
    p.add_argument("--prompt-ids", choices=("template", "cached", "cached-parallel"), default="template",
                   help="template: every candidate through the chat template; cached: the template's fixed "
                        "token ids kept, only the user text tokenised (checked at load; /health prompt_ids); "
                        "cached-parallel: as cached, long user texts tokenised in pieces at once where the "
                        "ids stay the same (checked at load; /health prompt_ids_parallel)")
    p.add_argument("--torch-threads", "--threads", dest="threads", type=int, default=0, metavar="N",
                   help="torch intra-op CPU threads, applied with torch.set_num_threads and reported in /health "
                        "as torch_threads (0: torch's default, which follows OMP_NUM_THREADS or the core count)")
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S, metavar="S",
                   help=f"close a connection idle this long between requests (default {IDLE_TIMEOUT_S:.0f})")
    p.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT_S, metavar="S",
                   help=f"cut off a request not received whole this long after its first byte "
                        f"(default {HEADER_TIMEOUT_S:.0f})")
    p.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, metavar="N",
                   help=f"connections served at once; more get 503 (default {MAX_CONNECTIONS})")
    p.add_argument("--max-candidates", type=int, default=MAX_CANDIDATES, metavar="N",
                   help=f"candidate sequences per request; more get 400 (default and most: upstream's {MAX_CANDIDATES})")
    p.add_argument("--compute-timeout", type=float, default=COMPUTE_TIMEOUT_S, metavar="S",
                   help=f"end an inference that holds the model longer than this many seconds per started "
                        f"{DEADLINE_CANDIDATES} candidate sequences with 503 (default {COMPUTE_TIMEOUT_S:.0f}: "
                        f"4096 noul questions get {4 * COMPUTE_TIMEOUT_S:.0f} s; 0: no limit)")
    p.add_argument("--max-queue", type=int, default=MAX_QUEUE, metavar="N",
                   help=f"inference requests waiting for the model behind the running one; one more gets 503 "
                        f"queue_full with Retry-After (default {MAX_QUEUE}; 0: a busy model refuses)")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--api-key", metavar="KEY",
                     help="require Authorization: Bearer KEY on every request but GET /health (off by default, as "
                          "upstream; the key shows in the process list: prefer --api-key-env)")
    key.add_argument("--api-key-env", metavar="VAR",
                     help="as --api-key, the key read from the environment variable VAR")
    p.add_argument("--trace-dir", type=Path, default=None, metavar="DIR",
                   help="allow traced requests (header X-OpenJev-Trace: NAME): each runs under the PyTorch "
                        "profiler and writes DIR/NAME.pt.trace.json.gz (docs/traces.md); off by default")
    return p


def _event(name: str, **fields: Any) -> None:
    print(json.dumps({"event": name, **fields}), file=sys.stderr, flush=True)


def _code_commit() -> str:
    if given := os.environ.get("OPENJEV_CODE_COMMIT"):
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5, check=False)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _static_meta(args: argparse.Namespace) -> tuple[StaticMeta, Any]:
    """Check the checkpoint (cheap, before binding) and collect the metadata that never changes."""
    if parse_fusions(args.fuse) and args.mode != "fast":
        raise ReproError("--fuse is part of fast mode only; use --mode fast or drop the flag.")
    if args.checkpoint is not None:
        package = read_package(args.checkpoint)
        return StaticMeta(base_model_id=package.base_model_id, base_revision=package.base_revision,
                          checkpoint_sha256=package_sha256(package.root), method=METHOD,
                          code_commit=_code_commit()), package
    if args.tokenizer is None:
        raise ReproError("--random-init needs --tokenizer DIR (the fixture's base/ directory will do).")
    if not args.random_init.is_file():
        raise ReproError(f"Model config {args.random_init} does not exist.")
    return StaticMeta(base_model_id=f"random-init:{args.random_init.stem}", base_revision=f"seed-{args.seed}",
                      checkpoint_sha256=None, method=METHOD, code_commit=_code_commit()), None


def load_model(args: argparse.Namespace, package: Any) -> DecisionModel:
    max_length = args.max_length or (package.max_length if package else 4096)
    settings = Settings(mode=args.mode, device=args.device, dtype=args.dtype, max_length=max_length,
                        cuda_graphs=args.cuda_graphs, compile=args.compile, prompt_format=args.prompt_format,
                        fusions=parse_fusions(args.fuse), prompt_ids=args.prompt_ids, kernels=args.kernels,
                        measure_hardware=args.measure_hardware)
    if package is not None:
        return DecisionModel.from_package(package, settings)
    return DecisionModel.from_random(args.random_init, args.tokenizer, args.seed, settings)


def _limits_error(args: argparse.Namespace) -> str | None:
    """The HTTP and compute limits out of range, in one sentence; None when they are fine."""
    if not (0 < args.idle_timeout <= 86400 and 0 < args.header_timeout <= 86400 and args.max_connections >= 1):
        return "--idle-timeout and --header-timeout must be in (0, 86400] s, --max-connections >= 1."
    if not (1 <= args.max_candidates <= MAX_CANDIDATES and 0 <= args.compute_timeout <= 86400):
        return f"--max-candidates must be in [1, {MAX_CANDIDATES}] and --compute-timeout in [0, 86400] s."
    if not 0 <= args.max_queue <= 1_000_000:
        return "--max-queue must be in [0, 1000000]."
    return None


def _model_flags_error(args: argparse.Namespace) -> str | None:
    """Model flags out of range, or not fitting the mode or the device, in one sentence; None when they fit."""
    if args.cuda_graphs < 0 or args.threads < 0 or (args.max_length is not None and args.max_length <= 0):
        return "--cuda-graphs and --torch-threads must be >= 0 and --max-length > 0."
    if (args.cuda_graphs or args.compile) and args.mode != "fast":
        return "--cuda-graphs and --compile are part of fast mode only; use --mode fast or drop the flag."
    if args.measure_hardware and args.device == "cpu":
        return "--measure-hardware measures a CUDA device; drop it or use --device cuda."
    return None


def main(argv: list[str] | None = None, *, load: Loader = load_model) -> int:
    """Serve until SIGTERM/SIGINT. `load` is a test seam: tests/servers/faulty_backend.py passes a loader
    that wraps the model to inject faults; a study never passes one, so nothing is checked per request."""
    args = build_parser().parse_args(argv)
    problem = _limits_error(args) or _model_flags_error(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        api_key = ApiKey.from_options(args.api_key, args.api_key_env)
        apply_kernel_choice(args.kernels, args.mode)
        meta, package = _static_meta(args)
        tracing = Tracing.allowed_in(args.trace_dir)  # issue 43: backend/tracing.py
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    try:
        server = ReferenceServer((args.host, args.port), meta, idle_timeout_s=args.idle_timeout,
                                 header_timeout_s=args.header_timeout, max_connections=args.max_connections,
                                 max_candidates=args.max_candidates, compute_timeout_s=args.compute_timeout,
                                 max_queue=args.max_queue, api_key=api_key)
    except OSError as exc:
        print(f"error: cannot bind {args.host}:{args.port} ({exc}).", file=sys.stderr)
        return 2
    server.tracing = tracing
    _event("listening", host=args.host, port=server.server_address[1])
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        started = time.perf_counter()
        server.attach(load(args, package))  # loaded, its kernels checked (--kernels), then warmed up
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        server.shutdown()
        return 2
    except Exception as exc:  # noqa: BLE001 - loading failed in a way we did not foresee: say so, exit non-zero
        print(f"error: loading the model failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        server.shutdown()
        return 1
    _event("ready", seconds=round(time.perf_counter() - started, 3), **server.model.describe())
    while not stop.wait(0.5):  # a timed wait: some sandboxes never wake an untimed one for a signal
        pass
    server.shutdown()
    server.server_close()
    return 0
