"""SYNTHETIC published evidence in the three other layouts of ThinkFlowLab/system1-omni.

Each function writes a folder laid out like one real public artefact (file names, keys, row
fields and the published summary's shape), with made-up values; no upstream data is copied.
The published figures are computed here with the plain expressions such a harness would use
(`sum(xs) / len(xs)`, not math.fsum), so some reproduce exactly and some only within rounding.

- `timings_csv`: like `benchmarks/prefill_batching/artifacts/20261006/` (timings.csv + summary.json,
  no digests);
- `provenance_json`: like jev_vl `evidence/review-20261006/` (provenance.json with
  `files: [{file, sha256, copied_verbatim}]`, raw-<mode>-c1-p<k>.jsonl, summary.json unlisted);
- `sha256sums`: like `recipe/lfm2/results/<run>/` (SHA256SUMS over gzip members, provenance.json
  with `report_source_sha256` of uncompressed originals).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
from pathlib import Path

ARMS = ("baseline", "candidate")


def _median(xs: list[float]) -> float:
    s, n = sorted(xs), len(xs)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _nearest_rank(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[math.ceil(q / 100 * len(s)) - 1]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def timings_csv(out: Path, seed: int = 1) -> Path:
    rng = random.Random(seed)
    workloads = {"single": (5, 1), "questions-4": (4, 4)}
    header = ["workload", "request_id", "decisions"] + [f"{a}_pass_{p}_s" for a in ARMS for p in (1, 2)]
    lines = [",".join(header)]
    seconds: dict[tuple[str, str, int], list[tuple[float, int]]] = {}
    for workload, (n, decisions) in workloads.items():
        for case in range(n):
            base = 0.02 * decisions + rng.random() * 0.01
            cells = []
            for arm in ARMS:
                for p in (1, 2):
                    s = base * (0.8 if arm == "candidate" and decisions > 1 else 1.0) + rng.random() * 1e-3
                    seconds.setdefault((arm, workload, p), []).append((s, decisions))
                    cells.append(repr(s))
            lines.append(",".join([workload, f"syn-{workload}-{case:02d}", str(decisions), *cells]))
    results: dict = {arm: {} for arm in ARMS}
    for (arm, workload, _), rows in seconds.items():
        ms = [s * 1000 for s, _ in rows]
        results[arm].setdefault(workload, []).append({
            "requests": len(ms), "mean_ms": sum(ms) / len(ms), "p50_ms": _median(ms), "p95_ms": _nearest_rank(ms, 95),
            "successful_decisions_per_second": sum(d for _, d in rows) / sum(s for s, _ in rows)})
    reductions = {}
    for workload in workloads:
        reductions[workload] = {}
        for metric in ("mean", "p95"):
            b = [x[f"{metric}_ms"] for x in results["baseline"][workload]]
            c = [x[f"{metric}_ms"] for x in results["candidate"][workload]]
            reductions[workload][f"{metric}_reduction_percent"] = 100 * (1 - (sum(c) / 2) / (sum(b) / 2))
    every = [r for rows in seconds.values() for r in rows]
    summary = {
        "date": "2026-01-06", "controls": {
            "independent_variable": "synthetic packing on or off", "gpu": "One SYNTHETIC-GPU, SM00",
            "gpu_uuid": "GPU-00000000-0000-0000-0000-000000000000",
            "acceptance": {"multi_question_mean_reduction_percent": 15, "single_mean_max_regression_percent": 2,
                           "decision_flips": 0, "maximum_probability_or_score_drift": 0.001}},
        "status": "complete", "results": results, "reductions": reductions,
        "gates": {"multi_question": True, "single_mean": False},
        "measured_requests": len(every), "measured_decisions": sum(d for _, d in every), "maximum_drift": 0.0}
    out.mkdir(parents=True)
    (out / "timings.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return out


def provenance_json(out: Path, seed: int = 2) -> Path:
    rng = random.Random(seed)
    out.mkdir(parents=True)
    clock = 1_700_000_000.0
    modes: dict[str, list[list[float]]] = {}
    files = []
    for mode, scale in (("off", 0.1), ("all", 0.037)):
        for p in (0, 1):
            rows, lat = [], []
            for i in range(6):
                s = scale + rng.random() * 0.005
                rows.append(json.dumps({"tag": mode, "pass": p, "i": i, "id": f"img-syn-{i:02d}", "group": "img",
                                        "t_start": clock, "status": 200, "client_s": s, "cache": "synthetic",
                                        "server_s": s - 0.002, "num_model_requests": 1,
                                        "usage": {"prompt_tokens": 900 + i, "completion_tokens": 1,
                                                  "total_tokens": 901 + i}, "t_end": clock + s}))
                clock += s + 0.001
                lat.append(s)
            name = f"raw-{mode}-c1-p{p}.jsonl"
            data = ("\n".join(rows) + "\n").encode()
            (out / name).write_bytes(data)
            files.append({"file": name, "sha256": _sha(data), "copied_verbatim": True})
            modes.setdefault(mode, []).append(lat)
    stats = b'[{"when": "before", "pass": 0, "stats": {"enabled": false}}]'
    (out / "stats-off-c1.json").write_bytes(stats)
    files.append({"file": "stats-off-c1.json", "sha256": _sha(stats), "copied_verbatim": True})
    summary: dict = {"job_id": 1, "concurrency": 1}
    for mode, passes in modes.items():
        every = [x for lat in passes for x in lat]
        summary[f"cache_{mode}"] = {"n": len(every), "median_s": _median(every), "mean_s": sum(every) / len(every),
                                    "passes": [{"pass": p, "n": len(lat), "median_s": _median(lat),
                                                "mean_s": sum(lat) / len(lat)} for p, lat in enumerate(passes)]}
    summary["off_div_all_median"] = summary["cache_off"]["median_s"] / summary["cache_all"]["median_s"]
    summary["parity"] = {m: {"pass": True, "n_compared": 12, "max_abs_dp": 0.01, "tol": 0.025} for m in modes}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    provenance = {"status": "synthetic", "hardware": {"gpu": "SYNTHETIC-GPU 80GB", "count": 1,
                                                       "compute_capability": "sm_00", "driver": "0.0.1"},
                  "files": files}
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    return out


def sha256sums(out: Path, seed: int = 3) -> Path:
    rng = random.Random(seed)
    out.mkdir(parents=True)
    rows: list[str] = []
    by_cell: dict[tuple[str, str], list[float]] = {}
    for variant in ("eager", "packed"):
        for cell in ("b1", "b4"):
            for sample in range(10):
                ms = (10 if variant == "eager" else 7) * (1 if cell == "b1" else 3) + rng.random()
                rows.append(json.dumps({"variant": variant, "cell": cell, "sample": sample, "latency_ms": ms}))
                by_cell.setdefault((variant, cell), []).append(ms)
    variants: dict = {}
    for (variant, cell), ms in by_cell.items():
        variants.setdefault(variant, {})[cell] = {"n": len(ms), "p50_ms": _median(ms), "p95_ms": _nearest_rank(ms, 95)}
    originals = {"bench.jsonl": ("\n".join(rows) + "\n").encode(),
                 "bench.summary.json": json.dumps({"summary": {"variants": variants}}).encode()}
    for name, data in originals.items():
        (out / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))
    (out / "README.md").write_text("# SYNTHETIC raw results\n", encoding="utf-8")
    provenance = {"date_utc": "2026-01-05", "hardware": {"gpu": "SYNTHETIC-GPU", "driver": "0.0.2"},
                  "report_source_sha256": {name: _sha(data) for name, data in originals.items()}}
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    write_sums(out)
    return out


def write_sums(out: Path) -> None:
    names = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != "SHA256SUMS")
    (out / "SHA256SUMS").write_text("".join(f"{_sha((out / n).read_bytes())}  {n}\n" for n in names), encoding="utf-8")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write SYNTHETIC folders in the three other system1-omni layouts.")
    parser.add_argument("out", type=Path, help="new folder; gets timings-csv/, provenance-json/, sha256sums/")
    target = parser.parse_args().out
    for name, make in (("timings-csv", timings_csv), ("provenance-json", provenance_json), ("sha256sums", sha256sums)):
        print(make(target / name))
