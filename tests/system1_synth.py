"""SYNTHETIC system1-omni evidence of any size, for importer scaling tests and benchmarks.

The layout and field names follow `fixtures/system1/make_layout.py` (itself modelled on the
native project's published `benchmarks/gdn/artifacts/<date>/`): a root `manifest.json` whose
`files` maps each path to `{source, sha256, bytes}`, and an `e2e/` folder with
`<arm>-measured-<pass>.jsonl`, `summary.json` and `cleanup.json`. Each row is about as long
as one of theirs (about 800 bytes: nested `raw` with answers, usage and metadata; a `checks`
object). Every value is made up.

Run: python tests/system1_synth.py OUT --rows 96000   (by default over 2 arms x 2 passes)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from pathlib import Path

ARCHIVE = "/srv/synthetic/archive/run-large"
ARMS = ("baseline", "candidate")


def _delta(case: int) -> float | int:
    return 0 if case % 3 == 0 else 1e-06 * (case % 4)


def _row(case: int, p: float, tokens: int, start: int, ns: int) -> str:
    """One row. Every few rows vary what a converter could get wrong: an integer delta, floats that
    Python prints with an exponent, a non-ASCII id, a failed check and a `correct` check."""
    latency_s = ns / 1e9
    raw = {"model": "synthetic/model-27b", "answers": {"decision": {"type": "noul", "noul": p}},
           "usage": {"input_tokens": tokens, "output_tokens": 0},
           "metadata": {"method": "synthetic_merged_decision_head", "temperature": 2.5,
                        "candidate_sequences": 1, "inference_seconds": latency_s - 0.0003,
                        "base_revision": "3" * 40, "max_length": 16384,
                        "prefix_cache": {"enabled": False, "mode": "independent_candidates"}}}
    checks = {"finite_probability": True, "usage": True, "decision": True, "probability": True,
              "uninstrumented": True, "baseline_exact": True}
    if case % 5 == 1:
        raw["metadata"].update(queue_seconds=3e-07 * case, clock_ns=1e16 + case, note="prüfung – ok")
    if case % 7 == 2:
        checks.update(baseline_exact=False, correct=case % 2 == 0)
    return json.dumps({
        "id": f"syn-case-{case:06d}" + ("-é" if case % 11 == 3 else ""), "latency_s": latency_s,
        "probability_yes": p, "probability_delta": _delta(case),
        "predicted": "yes" if p >= 0.5 else "no", "raw": raw, "checks": checks,
        "client_start_monotonic_ns": start, "client_end_monotonic_ns": start + ns})


def _median(ordered: list[float]) -> float:
    """The median as the published study computes it: the middle value, or the mean of the middle two."""
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def write_source(out: Path, rows: int, passes: int = 2, arms: tuple[str, ...] = ARMS, seed: int = 0) -> Path:
    """`rows` rows in all, over `arms` x `passes` passes (the same case ids in each); returns `out`."""
    per_pass = rows // (len(arms) * passes)
    if per_pass < 1 or per_pass * len(arms) * passes != rows:
        raise ValueError(f"rows {rows} is not a positive multiple of {len(arms) * passes}")
    rng = random.Random(seed)
    cases = [(rng.random(), rng.randint(80, 4000)) for _ in range(per_pass)]
    e2e = Path(out) / "e2e"
    e2e.mkdir(parents=True)
    clock = 1_000_000_000_000
    summary: dict = {"completed": True, "arms": {}}
    for arm in arms:
        entry: dict = {"passes": []}
        every: list[float] = []
        for index in range(1, passes + 1):
            lat_ms = []
            with open(e2e / f"{arm}-measured-{index}.jsonl", "w", encoding="utf-8") as fh:
                for case, (p, tokens) in enumerate(cases):
                    ns = 15_000_000 + tokens * 60_000 + rng.randint(0, 999_999)
                    fh.write(_row(case, p, tokens, clock, ns) + "\n")
                    clock += ns + 91_173
                    lat_ms.append(ns / 1e6)
            ordered = sorted(lat_ms)
            entry["passes"].append({"pass": index, "requests": len(lat_ms), "mean_ms": math.fsum(lat_ms) / len(lat_ms),
                                    "p50_ms": _median(ordered),
                                    "p95_ms": ordered[-(-95 * len(ordered) // 100) - 1],
                                    "max_probability_delta": max(_delta(case) for case in range(len(cases)))})
            every += lat_ms
        entry["aggregate_mean_ms"] = math.fsum(every) / len(every)
        entry["readiness"] = {"worker": {"process_to_readiness_seconds": 9.75}}
        summary["arms"][arm] = entry
    cleanup = {"all_task_processes_exited": True, "processes": [{"pid": 4101, "returncode": 0}]}
    summary["cleanup"] = cleanup
    (e2e / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (e2e / "cleanup.json").write_text(json.dumps(cleanup, indent=2) + "\n", encoding="utf-8")
    files = {}
    for path in sorted(p for p in Path(out).rglob("*") if p.is_file()):
        rel = path.relative_to(out).as_posix()
        digest, size = hashlib.sha256(), 0
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
                size += len(block)
        files[rel] = {"source": f"{ARCHIVE}/{rel}", "sha256": digest.hexdigest(), "bytes": size}
    manifest = {"date_utc": "2026-01-02", "files": files}
    (Path(out) / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return Path(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=96_000)
    args = parser.parse_args()
    write_source(args.out, args.rows)
    print(args.out)
