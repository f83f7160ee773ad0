"""Smoke benchmark: start several reference-backend configurations, run a request file, print figures.

    python -m openjev_repro.backend.smoke --checkpoint DIR --requests FILE [--device cuda] [--passes 2]

Each configuration (raw; fast; fast with --cuda-graphs 8 and 64 on CUDA) runs as its own server
subprocess on a free loopback port: one warm-up pass, then timed passes. It prints mean / max
latency, the largest probability difference to raw, differing decisions, and the /health report
(bound kernels, CUDA Graph captures, replays and evictions). Figures, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec

from ..decision import YES_THRESHOLD

__all__ = ["main"]


class _Event(msgspec.Struct):
    """A progress line of the backend's stderr (cli.py): listening (with its port), ready, ..."""

    event: str
    port: int | None = None


class _Task(msgspec.Struct):
    """A request file's line, as much as a request needs."""

    state: msgspec.Raw  # both passed on as written
    question: msgspec.Raw


class _NoulAnswer(msgspec.Struct):
    noul: float


class _Answers(msgspec.Struct):
    answers: dict[str, _NoulAnswer]


class _Health(msgspec.Struct):
    """What the figures show of /health."""

    device: str
    dtype: str
    lora: str
    implementations: dict[str, int | str | list[str]]
    cuda_graphs: dict[str, int] | None


def _start(args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    with open(log, "wb") as err:  # the child keeps its own descriptor of the log
        proc = subprocess.Popen([sys.executable, "-m", "openjev_repro.backend", "--port", "0", *args],
                                stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 600
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith('{"event": '):
                continue
            event = msgspec.json.decode(line, type=_Event)
            if event.event == "listening":
                url = f"http://127.0.0.1:{event.port}"
            if event.event == "ready" and url:
                return proc, url
        time.sleep(0.2)
    raise SystemExit(f"server never became ready:\n{log.read_text()[-3000:]}")


def _pass(client: httpx.Client, url: str, bodies: list[bytes]) -> tuple[list[float], list[float]]:
    latencies, probs = [], []
    for body in bodies:
        started = time.perf_counter()
        response = client.post(f"{url}/v1/systemone", content=body)
        latencies.append(time.perf_counter() - started)
        response.raise_for_status()
        probs.append(msgspec.json.decode(response.content, type=_Answers).answers["q"].noul)
    return latencies, probs


def _measure(name: str, url: str, bodies: list[bytes], passes: int) -> tuple[list[float], list[float], _Health]:
    """Pass means (ms), the last pass's probabilities and /health of one running configuration."""
    with httpx.Client(timeout=300) as client:
        _pass(client, url, bodies)  # warm-up / feasibility, excluded
        print(f"{name}: warm-up pass done", flush=True)
        means: list[float] = []
        probs: list[float] = []
        for _ in range(passes):
            lat, pr = _pass(client, url, bodies)
            means.append(1000 * statistics.mean(lat))
            print(f"{name}: pass mean {means[-1]:.2f} ms", flush=True)
            if probs and pr != probs:
                print(f"{name}: probabilities changed between passes")
            probs = pr
        return means, probs, msgspec.json.decode(client.get(f"{url}/health").content, type=_Health)


def _stop(name: str, proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        print(f"{name}: server ignored SIGTERM for 30 s; killed", flush=True)
        proc.kill()
        proc.wait()


def _print_figures(name: str, means: list[float], probs: list[float], reference: list[float], health: _Health) -> None:
    delta = max(abs(x - y) for x, y in zip(probs, reference, strict=True))
    differ = sum((x >= YES_THRESHOLD) != (y >= YES_THRESHOLD) for x, y in zip(probs, reference, strict=True))
    print(f"{name:15s} n={len(probs)} pass means ms={[round(m, 2) for m in means]} "
          f"max|dp| vs raw={delta:.2e} differing decisions={differ} yes={sum(x >= YES_THRESHOLD for x in probs)}")
    print(f"{'':15s} device={health.device} dtype={health.dtype} lora={health.lora} "
          f"impl={json.dumps(health.implementations)} graphs={health.cuda_graphs}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--requests", required=True, type=Path)
    p.add_argument("--device", default="auto")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--max-length", default="16384")
    p.add_argument("--logs", type=Path, default=Path(".cache") / "smoke",
                   help="folder for the servers' logs (default .cache/smoke, outside what git tracks)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    a.logs.mkdir(parents=True, exist_ok=True)
    try:
        tasks = [msgspec.json.decode(line, type=_Task) for line in a.requests.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, msgspec.DecodeError) as exc:
        print(f"error: {a.requests}: {exc}", file=sys.stderr)
        return 1
    bodies = [msgspec.json.encode({"model": "open-jev", "state": t.state, "questions": {"q": t.question}})
              for t in tasks]
    import torch

    configs = {"raw": ["--mode", "raw"], "fast": ["--mode", "fast"]}
    if torch.cuda.is_available() and a.device != "cpu":  # fast with CUDA Graphs (8 and 64 captures) too
        configs.update({"fast-graphs-8": ["--mode", "fast", "--cuda-graphs", "8"],
                        "fast-graphs-64": ["--mode", "fast", "--cuda-graphs", "64"]})
    reference: list[float] | None = None
    for name, extra in configs.items():
        proc, url = _start(["--checkpoint", a.checkpoint, "--device", a.device, "--max-length", a.max_length, *extra],
                           a.logs / f"smoke-{name}.log")
        try:
            means, probs, health = _measure(name, url, bodies, a.passes)
        finally:
            _stop(name, proc)
        reference = reference or probs
        _print_figures(name, means, probs, reference, health)
    return 0


if __name__ == "__main__":
    sys.exit(main())
